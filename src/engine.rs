//! The SQL side of a shard: turns statement text into a [`Plan`] with sqlparser and runs it.
//!
//! Today it answers constant queries (`SELECT 1`, `SELECT version()`, expressions, casts),
//! session settings (`SET`/`SHOW`/`RESET`), transaction control, `DISCARD ALL` and
//! `DEALLOCATE`; other statements get 0A000. Tables arrive with the compute issue and slot in
//! as another [`Plan`] variant.

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use bumpalo::Bump;
use std::time::Duration;

use protocol::backend::{self, FieldDescription, TransactionStatus};
use protocol::frontend::{Bind, Oids};
use protocol::types::{binary, text, Scalar, TextContext, TimeZone, Type, Value};
use protocol::{Format, PgError, Severity, SqlState};
use shards::engine::{Cx, Engine, Execution, SessionStart};
use smallvec::SmallVec;
use sqlparser::ast::{self, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser, ParserError};

use crate::compute::exec::{self, ScanCursor};
use crate::compute::storage::View;
use crate::compute::{IndexDef, Timestamp, TxId};
use crate::dispatch::{
    self, write_data_row, Catalog, Dispatcher, Formats, Message, Params, ReadAt, ReadSpec, Request,
    SessionSnapshot, Shared, StatementSession,
};
use crate::notify::{self, Listeners, SessionNotify};
use crate::settings::{Isolation, Settings};
use crate::sql::expr::{self, ConstSelect, EvalEnv, PlanCtx, SessionInfo, Stamps};
use crate::sql::lift::{self, Literal};
use crate::sql::plan::{self as table_plan, TablePlan};
use crate::stats::{self, Counters, ShardStats};
use shards::runtime::Mesh;
use shards::time::StatementClock;
use std::cell::Cell;
use std::sync::Arc;

/// A planned statement.
pub enum Plan {
    Empty,
    Select(ConstSelect),
    /// A statement over tables, run by the compute (see `dispatch`).
    Table(Arc<TablePlan>),
    /// `ALTER TABLE t ADD [CONSTRAINT c] PRIMARY KEY (..) | UNIQUE (..)`.
    AddConstraint {
        table: String,
        index: IndexDef,
        primary: bool,
    },
    /// `VACUUM` / `ANALYZE`: nothing to do (versions are compacted by the compute).
    Maintenance(&'static str),
    Set {
        name: String,
        value: Option<String>,
        local: bool,
    },
    Show(String),
    ShowAll,
    Reset(Option<String>),
    Begin {
        tag: &'static str,
        modes: Vec<(String, String)>,
    },
    Commit,
    Rollback,
    DiscardAll,
    Deallocate(Option<String>),
    /// LISTEN, UNLISTEN (`None`: `UNLISTEN *`) and NOTIFY (see `notify`).
    Listen(String),
    Unlisten(Option<String>),
    Notify {
        channel: String,
        payload: String,
    },
}

/// A prepared statement: the plan and what Describe reports.
pub struct Prepared {
    plan: Plan,
    param_types: Vec<Type>,
    columns: Vec<(String, Type)>,
    /// For a SELECT parsed with the extended protocol: the plan with constants folded, made at
    /// the first Bind (where PostgreSQL plans) and reused by later ones.
    folded: OnceCell<Result<Folded, PgError>>,
    /// The RowDescription a simple Query of this statement sends (every column in text),
    /// encoded at its first use: the plan cache hands the same `Prepared` to every later run.
    text_row_description: OnceCell<Box<[u8]>>,
}

impl Prepared {
    fn new(plan: Plan, param_types: Vec<Type>, columns: Vec<(String, Type)>) -> Prepared {
        Prepared {
            plan,
            param_types,
            columns,
            folded: OnceCell::new(),
            text_row_description: OnceCell::new(),
        }
    }

    fn text_row_description(&self, arena: &Bump) -> &[u8] {
        self.text_row_description.get_or_init(|| {
            let mut out = Vec::new();
            write_row_description(&self.columns, &[], arena, &mut out);
            out.into_boxed_slice()
        })
    }

    /// Fold constants if this statement was planned without folding; Bind calls this.
    fn fold(&self) -> Result<(), PgError> {
        let fold = || match &self.plan {
            Plan::Select(select) => select.folded().map(|s| Folded::Const(Box::new(s))),
            Plan::Table(plan) => plan.folded().map(|p| Folded::Table(Arc::new(p))),
            _ => Ok(Folded::Nothing),
        };
        self.folded
            .get_or_init(fold)
            .as_ref()
            .map(|_| ())
            .map_err(Clone::clone)
    }
}

/// A statement's plan with constants folded (made at the first Bind).
enum Folded {
    Const(Box<ConstSelect>),
    Table(Arc<TablePlan>),
    Nothing,
}

pub struct Portal {
    statement: Rc<Prepared>,
    /// Inline: binding a point select allocates nothing.
    params: Params,
    formats: Formats,
    /// For a portal executed with `max_rows` whose plan must materialize: every row, encoded
    /// as DataRows at the first Execute, handed out `max_rows` at a time from `next_byte`.
    rows: Option<Vec<u8>>,
    next_byte: usize,
    /// For a portal executed with `max_rows` whose plan streams: where its scan stands.
    scan: Option<PortalScan>,
    done: bool,
}

/// A portal's resumable scan between Executes: each Execute produces the next `max_rows` rows
/// (in chunks, flushed as a statement's are) at the snapshot its first Execute read, held
/// until the portal finishes or is dropped (Close, the end of its transaction, the
/// connection's end).
struct PortalScan {
    cursor: ScanCursor,
    read: ReadSpec,
    hold: Option<SnapshotHold>,
}

pub struct Session {
    settings: Settings,
    /// ParameterStatus reports owed to the client, sent before the next ReadyForQuery.
    reports: Vec<(&'static str, String)>,
    user: String,
    database: String,
    process_id: i32,
    /// The running statement's start times (see [`Session::start_statement`]).
    stamps: Stamps,
    /// When the session's transaction (a block, or an implicit one) started; None between
    /// transactions.
    transaction_started_us: Option<i64>,
    /// What the compute needs of this session, shared with every request it sends; replaced
    /// when the text settings change.
    peek_session: Arc<SessionSnapshot>,
    /// The open transaction block's snapshot and, once it wrote, its id at the compute.
    block: Option<Block>,
    /// The COPY FROM STDIN whose data is being received.
    pending_copy: Option<Arc<TablePlan>>,
    /// Set while a simple Query runs (COPY FROM STDIN is only offered there).
    in_simple_query: bool,
    /// The open block is an implicit transaction: a Query's whose text holds several
    /// statements (`Frontend::simple_query_inner`), or the extended protocol's, opened by a
    /// write with more to come before its Sync (`Engine::execute`). It commits when the Query
    /// ends or at the Sync, rolls back at an error, becomes a block of the client's at BEGIN,
    /// and COMMIT or ROLLBACK warn in it.
    implicit: bool,
    /// LISTEN/NOTIFY: what the open transaction will do at commit, and the inbox.
    notify: SessionNotify,
}

/// What a transaction block has done at the compute.
#[derive(Clone, Copy)]
struct Block {
    /// The timestamp its reads see. None until the first read of a `serializable` block,
    /// which reads at the compute's latest timestamp and keeps it.
    snapshot: Option<Timestamp>,
    /// The snapshot this shard holds for it in `Shared::holds` (at most `snapshot`), so the
    /// compute keeps every version the block can read.
    hold: Timestamp,
    tx: TxId,
    wrote: bool,
}

impl Session {
    /// Replace the session the compute sees if the text settings changed since it was made.
    fn refresh_peek_session(&mut self) {
        if self.peek_session.text != *self.settings.text_context() {
            self.peek_session = Arc::new(SessionSnapshot {
                text: self.settings.text_context().clone(),
                ..(*self.peek_session).clone()
            });
        }
    }

    /// The session as the compute sees it, to send with a request: a reference count.
    fn peek_session(&mut self) -> Arc<SessionSnapshot> {
        self.refresh_peek_session();
        self.peek_session.clone()
    }

    /// A statement starts. As in PostgreSQL, its `statement_timestamp()` is when its protocol
    /// message arrived: an Execute's own time, or for every statement of a Query's text the
    /// time [`Frontend::simple_query`] took. Its `now()` is its transaction's first
    /// statement's, until COMMIT/ROLLBACK or the end of the implicit transaction forgets it.
    fn start_statement(&mut self, clock: StatementClock<'_>) {
        if !self.in_simple_query {
            self.stamps.statement_us = pg_us(clock.start_us());
        }
        self.stamps.transaction_us = *self
            .transaction_started_us
            .get_or_insert(self.stamps.statement_us);
    }
}

/// The table a write plan changes, if it names one by id.
fn written_table(plan: &TablePlan) -> Option<crate::compute::TableId> {
    match plan {
        TablePlan::Insert(p) => Some(p.table),
        TablePlan::Update(p) => Some(p.table),
        TablePlan::Delete(p) => Some(p.table),
        TablePlan::CopyFrom { table, .. } => Some(table.id),
        _ => None,
    }
}

/// The command a plan that changes tables or the catalog runs, as PostgreSQL names it when a
/// read-only transaction refuses it (25006); None for a read.
fn write_command(plan: &TablePlan) -> Option<&'static str> {
    Some(match plan {
        TablePlan::Select(_) | TablePlan::CopyTo { .. } => return None,
        TablePlan::Insert(_) => "INSERT",
        TablePlan::Update(_) => "UPDATE",
        TablePlan::Delete(_) => "DELETE",
        TablePlan::Truncate { .. } => "TRUNCATE TABLE",
        TablePlan::CopyFrom { .. } => "COPY FROM",
        TablePlan::CreateTable { .. } => "CREATE TABLE",
        TablePlan::CreateIndex { .. } => "CREATE INDEX",
        TablePlan::DropTable { .. } => "DROP TABLE",
        TablePlan::DropIndex { .. } => "DROP INDEX",
    })
}

/// 25006, as PostgreSQL refuses `command` in a read-only transaction.
fn read_only_error(command: &str) -> PgError {
    PgError::new(
        SqlState(*b"25006"),
        format!("cannot execute {command} in a read-only transaction"),
    )
}

/// Whether a statement changes the catalog. DDL takes effect at once, in a block or not, and
/// may not follow a write to its table in the same transaction (`Dispatcher::lock_for_ddl`):
/// an implicit transaction commits what ran before it, so that `insert ...; create index ...`
/// in one Query runs as it did before implicit transactions, each statement on its own.
fn changes_catalog(prepared: &Prepared) -> bool {
    match &prepared.plan {
        Plan::AddConstraint { .. } => true,
        Plan::Table(plan) => matches!(
            **plan,
            TablePlan::CreateTable { .. }
                | TablePlan::CreateIndex { .. }
                | TablePlan::DropTable { .. }
                | TablePlan::DropIndex { .. }
        ),
        _ => false,
    }
}

/// Whether a statement writes to tables (its implicit transaction must be able to roll back).
fn writes(prepared: &Prepared) -> bool {
    match &prepared.plan {
        Plan::Table(plan) => matches!(
            **plan,
            TablePlan::Insert(_)
                | TablePlan::Update(_)
                | TablePlan::Delete(_)
                | TablePlan::Truncate { .. }
        ),
        _ => false,
    }
}

/// The relation a SELECT (or COPY TO) reads.
fn plan_table(plan: &TablePlan) -> Option<crate::compute::TableId> {
    match plan {
        TablePlan::Select(select) | TablePlan::CopyTo { source: select, .. } => Some(select.table),
        _ => None,
    }
}

impl SessionInfo for Session {
    fn current_setting(&self, name: &str) -> Option<String> {
        self.settings.get(name).map(str::to_string)
    }
    fn text_context(&self) -> &TextContext {
        self.settings.text_context()
    }
    fn database(&self) -> &str {
        &self.database
    }
    fn user(&self) -> &str {
        &self.user
    }
    fn backend_pid(&self) -> i32 {
        self.process_id
    }
    fn stamps(&self) -> Stamps {
        self.stamps
    }
}

/// Microseconds since 2000-01-01 UTC (PostgreSQL's epoch) from microseconds since 1970's.
fn pg_us(unix_us: i64) -> i64 {
    const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;
    unix_us - PG_EPOCH_UNIX_SECS * 1_000_000
}

/// The per-shard engine: plan cache, catalog copy, the way to the compute, and the snapshots
/// this shard's transaction blocks hold.
pub struct Frontend {
    plans: RefCell<PlanCache>,
    dispatcher: Rc<Dispatcher>,
    shared: Arc<Shared>,
    /// This shard's copy of the catalog and the version it was copied at.
    catalog: RefCell<(u64, Rc<Catalog>)>,
    next_tx: Cell<u64>,
    /// Snapshots held by this shard's open blocks and results produced in chunks.
    held: Rc<HeldSnapshots>,
    /// The shard's serving-layer metrics, resolved once (None off a shard).
    metrics: Option<Rc<shards::metrics::ShardMetrics>>,
    /// This shard's sessions that LISTEN.
    listeners: Listeners,
}

impl Frontend {
    /// Runs on the shard's own thread, inside its executor (it starts the dispatcher's task).
    pub fn new(mesh: Mesh<Message>, shared: Arc<Shared>) -> Frontend {
        let dispatcher = Dispatcher::new(mesh, shared.clone());
        Frontend {
            plans: RefCell::new(PlanCache::default()),
            catalog: RefCell::new((shared.catalog_version(), Rc::new(shared.catalog_snapshot()))),
            next_tx: Cell::new(1),
            held: Rc::new(HeldSnapshots {
                shard: dispatcher.shard_id,
                shared: shared.clone(),
                held: RefCell::new(BTreeMap::new()),
            }),
            shared,
            dispatcher,
            metrics: shards::metrics::current(),
            listeners: Listeners::default(),
        }
    }

    /// The catalog to plan against: this shard's copy, refreshed (and the plan cache cleared)
    /// when DDL anywhere moved the shared version. One atomic load per query.
    fn catalog(&self) -> Rc<Catalog> {
        self.refresh_catalog();
        self.catalog.borrow().1.clone()
    }

    /// Re-copy the catalog and clear the plan cache if DDL moved the shared version since the
    /// last statement: called before every plan-cache lookup, so no cached plan outlives the
    /// catalog it was planned against. One atomic load when nothing changed.
    fn refresh_catalog(&self) {
        let version = self.shared.catalog_version();
        let mut local = self.catalog.borrow_mut();
        if local.0 != version {
            *local = (version, Rc::new(self.shared.catalog_snapshot()));
            self.plans.borrow_mut().clear();
        }
    }

    /// Hold a snapshot for a block starting now: the frontier this shard sees, published as
    /// held before it is used (see `oracle::Holds`). Returns the timestamp held.
    fn hold_snapshot(&self) -> Timestamp {
        self.held.hold_frontier(&self.dispatcher.counters)
    }

    /// A block that held `ts` ended.
    fn release_snapshot(&self, ts: Timestamp) {
        self.held.release(ts);
    }

    /// The shard's dispatcher (a metrics endpoint gathers every shard's stats through it).
    pub fn dispatcher(&self) -> Rc<Dispatcher> {
        self.dispatcher.clone()
    }

    /// This shard's counters, for `ringwire.shard_stats`.
    fn local_stats(&self) -> ShardStats {
        let c = &self.dispatcher.counters;
        let (plan_cache_hits, plan_cache_misses) = self.plan_cache_stats();
        let held = self.held.held.borrow();
        ShardStats {
            shard: self.dispatcher.shard_id,
            oracle_hits: c.oracle_hits.get(),
            oracle_misses: c.oracle_misses.get(),
            latest_reads: c.latest_reads.get(),
            direct_requests: c.direct_requests.get(),
            batches_sent: c.batches_sent.get(),
            requests_sent: c.requests_sent.get(),
            batch_max: c.batch_max.get(),
            plan_cache_hits,
            plan_cache_misses,
            replica_hits: c.replica_hits.get(),
            replica_stale: c.replica_stale.get(),
            replica_fallbacks: c.replica_fallbacks.get(),
            replica_applied: self.dispatcher.replica.as_ref().map(|r| r.applied()),
            replica_versions: self
                .dispatcher
                .replica
                .as_ref()
                .map(|r| r.version_count() as u64),
            open_snapshots: held.values().map(|&n| n as u64).sum(),
            oldest_snapshot: held.keys().next().copied(),
            serving: match &self.metrics {
                Some(m) => m.snapshot(),
                None => {
                    shards::metrics::ShardMetrics::new(self.dispatcher.shard_id, false).snapshot()
                }
            },
            engine: stats::EngineHistograms {
                batch_sizes: c.batch_sizes.copy(),
                round_trip_us: c.round_trip_us.copy(),
                peek_us: match &self.dispatcher.compute {
                    Some(compute) => compute.peek_us.copy(),
                    None => shards::metrics::latency_histogram(),
                },
            },
        }
    }

    /// The transaction a DDL statement's table locks belong to: the open block's, so the
    /// compute can tell a table the block itself has written (see `Compute::lock_for_ddl`),
    /// or a fresh one.
    fn ddl_tx(&self, session: &Session) -> TxId {
        match &session.block {
            Some(block) => block.tx,
            None => self.new_tx(),
        }
    }

    /// A transaction id unique across shards: the shard in the high bits.
    fn new_tx(&self) -> TxId {
        let n = self.next_tx.get();
        self.next_tx.set(n + 1);
        ((self.dispatcher.shard_id as u64) << 48) | n
    }

    /// (hits, misses) of this shard's plan cache.
    pub fn plan_cache_stats(&self) -> (u64, u64) {
        let c = self.plans.borrow();
        (c.hits, c.misses)
    }
}

/// Per-shard plan cache: statement text (plus, for Parse, the declared parameter types) →
/// the planned statement, so a repeated query skips sqlparser and planning. A plan depends on
/// the session only through the TimeZone literals were read in, which the entry records and a
/// hit checks. DDL will clear it (the table engine); it is also cleared when it reaches
/// [`PLAN_CACHE_ENTRIES_MAX`] entries, which bounds its memory.
#[derive(Default)]
struct PlanCache {
    /// Looked up once per simple Query: keyed with aHash (randomly seeded, so client-chosen
    /// texts cannot aim at collisions), where std's SipHash was ~0.5% of a shard's CPU.
    simple: HashMap<Box<str>, CachedPlan, ahash::RandomState>,
    /// Simple-protocol statements with their literals lifted into parameters (`sql::lift`),
    /// by lifted text. Apart from `simple`: a client's own text `... = $1` must not find them.
    lifted: HashMap<Box<str>, CachedPlan, ahash::RandomState>,
    /// Per text, one plan per list of declared parameter types.
    extended: HashMap<Box<str>, Vec<(ParamOids, CachedPlan)>, ahash::RandomState>,
    hits: u64,
    misses: u64,
}

type ParamOids = Box<[u32]>;

struct CachedPlan {
    prepared: Rc<Prepared>,
    time_zone: TimeZone,
}

/// Distinct statement texts kept per shard: ORMs and drivers use a few hundred; a client that
/// sends unique literals every time only ever costs this much memory.
const PLAN_CACHE_ENTRIES_MAX: usize = 4096;

impl PlanCache {
    /// A simple-protocol plan by text (`lifted`: by lifted text). Not counted: a statement
    /// may be looked up both ways, and counts once ([`PlanCache::count`]).
    fn get_simple(&self, sql: &str, lifted: bool, tz: &TimeZone) -> Option<Rc<Prepared>> {
        let map = if lifted { &self.lifted } else { &self.simple };
        map.get(sql)
            .filter(|c| c.time_zone == *tz)
            .map(|c| c.prepared.clone())
    }

    fn get_extended(&mut self, sql: &str, oids: Oids<'_>, tz: &TimeZone) -> Option<Rc<Prepared>> {
        let hit = self.extended.get(sql).and_then(|v| {
            v.iter()
                .find(|(o, c)| {
                    c.time_zone == *tz && o.len() == oids.len() && o.iter().copied().eq(oids.iter())
                })
                .map(|(_, c)| c.prepared.clone())
        });
        self.count(hit.is_some());
        hit
    }

    fn count(&mut self, hit: bool) {
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }

    fn make_room(&mut self) {
        if self.simple.len() + self.lifted.len() + self.extended.len() >= PLAN_CACHE_ENTRIES_MAX {
            self.clear();
        }
    }

    fn clear(&mut self) {
        self.simple.clear();
        self.lifted.clear();
        self.extended.clear();
    }

    fn put_simple(&mut self, sql: &str, lifted: bool, prepared: Rc<Prepared>, tz: &TimeZone) {
        self.make_room();
        let map = if lifted {
            &mut self.lifted
        } else {
            &mut self.simple
        };
        map.insert(
            sql.into(),
            CachedPlan {
                prepared,
                time_zone: tz.clone(),
            },
        );
    }

    fn put_extended(&mut self, sql: &str, oids: Oids<'_>, prepared: Rc<Prepared>, tz: &TimeZone) {
        self.make_room();
        let entry = (
            oids.iter().collect::<Box<[u32]>>(),
            CachedPlan {
                prepared,
                time_zone: tz.clone(),
            },
        );
        let versions = self.extended.entry(sql.into()).or_default();
        versions.retain(|(o, _)| **o != *entry.0);
        versions.push(entry);
    }
}

/// Most operators and keywords an expression may chain (`1+1+…`, `a AND b AND …`,
/// `x::int::int…`, `x IS NULL IS NULL …`), counted along its deepest path
/// ([`operator_depth`]). sqlparser builds such a chain as a tree as deep as the chain is long
/// (its own recursion limit covers nesting, not chains), and planning, evaluating and dropping
/// it recurse once per level: past this, 54001 as in PostgreSQL (whose limit is its
/// `max_stack_depth`), before anything is built. At this depth a debug build uses about half
/// of a shard's stack (`THREAD_STACK_BYTES` in main.rs).
pub const MAX_EXPRESSION_OPERATORS: usize = 10_000;

/// An upper bound of how deep the expressions of `sql` nest through chains, which
/// sqlparser builds in a loop, unbounded by its recursion limit: every operator and every
/// keyword (`IS NULL`, `LIKE`, `BETWEEN`, `COLLATE`, `UNION`, … extend a chain with a word)
/// counts one level. Along each path of parentheses, a level counts the tokens of its current
/// item (since its last comma) plus the deepest group closed in it; a closed group counts as
/// its deepest item, commas or not. So list items and arguments do not deepen one another (a
/// `VALUES` row of ten thousand negative numbers is shallow), but a chain of groups each
/// holding a chain adds up.
fn operator_depth(sql: &str) -> usize {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return 0; // the parser reports it
    };
    // Per open group: (levels of its current item, its deepest group closed in that item,
    // its deepest item before the last comma).
    let mut stack: Vec<(usize, usize, usize)> = vec![(0, 0, 0)];
    let (mut path, mut deepest) = (0usize, 0usize);
    for t in &tokens {
        let nested = stack.len() > 1;
        let top = stack.last_mut().expect("the outermost level stays");
        match t {
            Token::LParen | Token::LBracket => stack.push((0, 0, 0)),
            Token::RParen | Token::RBracket if nested => {
                let (run, inner, best) = stack.pop().expect("more than one");
                path -= run + inner;
                let depth = best.max(run + inner);
                let top = stack.last_mut().expect("the outermost level stays");
                if depth > top.1 {
                    path += depth - top.1;
                    top.1 = depth;
                }
            }
            Token::Comma | Token::SemiColon => {
                path -= top.0 + top.1;
                top.2 = top.2.max(top.0 + top.1);
                (top.0, top.1) = (0, 0);
            }
            Token::Word(w) if w.keyword != Keyword::NoKeyword => {
                top.0 += 1;
                path += 1;
            }
            Token::Word(_)
            | Token::Number(..)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::DollarQuotedString(_)
            | Token::SingleQuotedByteStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::Placeholder(_)
            | Token::Whitespace(_)
            | Token::Period
            | Token::RParen
            | Token::RBracket
            | Token::EOF => {}
            _ => {
                top.0 += 1;
                path += 1;
            }
        }
        deepest = deepest.max(path);
    }
    deepest
}

/// Parse statement text into sqlparser statements, mapping parse errors to 42601 with a
/// position as PostgreSQL reports it.
pub fn parse_sql(sql: &str) -> Result<Vec<Statement>, PgError> {
    // (Each operator takes two bytes at least: a shorter text cannot chain too many.)
    if sql.len() > 2 * MAX_EXPRESSION_OPERATORS && operator_depth(sql) > MAX_EXPRESSION_OPERATORS {
        return Err(
            PgError::new(SqlState(*b"54001"), "stack depth limit exceeded").with_hint(format!(
                "An expression chains more than {MAX_EXPRESSION_OPERATORS} operators and keywords."
            )),
        );
    }
    Parser::parse_sql(&PostgreSqlDialect {}, sql).or_else(|e| {
        // sqlparser 0.63 accepts COPY's boolean options only as TRUE/FALSE, PostgreSQL also as
        // ON/OFF (pgbench -i sends `copy ... from stdin with (freeze on)`): retry with those
        // spelled the way sqlparser takes them.
        match copy_booleans_as_keywords(sql) {
            Some(fixed) => {
                Parser::parse_sql(&PostgreSqlDialect {}, &fixed).map_err(|_| syntax_error(sql, e))
            }
            None => Err(syntax_error(sql, e)),
        }
    })
}

/// `sql` with `on`/`off` after COPY's FREEZE/HEADER options rewritten to TRUE/FALSE, or None
/// if it is not such a COPY.
fn copy_booleans_as_keywords(sql: &str) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    if !lower.trim_start().starts_with("copy") {
        return None;
    }
    let mut fixed = lower.clone();
    for option in ["freeze", "header"] {
        for (value, keyword) in [(" on", " true"), (" off", " false")] {
            let pattern = format!("{option}{value}");
            if let Some(i) = fixed.find(&pattern) {
                let end = i + pattern.len();
                if fixed[end..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_')
                {
                    fixed.replace_range(i + option.len()..end, keyword);
                }
            }
        }
    }
    // Identifiers were lowercased too, which is how PostgreSQL folds unquoted names; a COPY
    // with quoted mixed-case names and ON/OFF options is left to fail as before.
    (fixed != lower && !sql.contains('"')).then_some(fixed)
}

fn syntax_error(sql: &str, e: ParserError) -> PgError {
    let msg = match &e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => {
            return PgError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                "stack depth limit exceeded",
            )
            .with_hint("The statement is nested too deeply.")
        }
    };
    // sqlparser says "Expected: X, found: TOKEN at Line: L, Column: C".
    let found = msg.split("found: ").nth(1).map(|rest| {
        rest.split(" at Line: ")
            .next()
            .unwrap_or(rest)
            .trim()
            .to_string()
    });
    let position = line_col(&msg).map(|(line, col)| char_offset(sql, line, col));
    match found.as_deref() {
        Some("EOF") | None if position.is_none() || found.as_deref() == Some("EOF") => {
            PgError::new(SqlState::SYNTAX_ERROR, "syntax error at end of input")
                .with_position(sql.chars().count() as u32 + 1)
        }
        Some(token) => {
            let mut err = PgError::new(
                SqlState::SYNTAX_ERROR,
                format!("syntax error at or near \"{}\"", token.trim_matches('\'')),
            );
            if let Some(p) = position {
                err = err.with_position(p);
            }
            err
        }
        None => PgError::new(SqlState::SYNTAX_ERROR, format!("syntax error: {msg}")),
    }
}

fn line_col(msg: &str) -> Option<(usize, usize)> {
    let rest = msg.rsplit("Line: ").next()?;
    let (line, col) = rest.split_once(", Column: ")?;
    let col: String = col.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((line.trim().parse().ok()?, col.parse().ok()?))
}

/// 1-based character offset of (line, column), both 1-based.
fn char_offset(sql: &str, line: usize, col: usize) -> u32 {
    let mut offset = 0;
    for (i, l) in sql.split('\n').enumerate() {
        if i + 1 == line {
            return (offset + col) as u32;
        }
        offset += l.chars().count() + 1;
    }
    offset as u32
}

fn unsupported(what: &str) -> PgError {
    PgError::new(
        SqlState::FEATURE_NOT_SUPPORTED,
        format!("{what} is not supported by ringwire yet"),
    )
}

/// Render a SET value list the way PostgreSQL stores it: string literals unquoted, identifiers
/// and numbers as written, several values joined with ", ".
fn set_value_text(values: &[ast::Expr]) -> Result<Option<String>, PgError> {
    let mut parts = Vec::with_capacity(values.len());
    for v in values {
        let text = match v {
            ast::Expr::Value(val) => match &val.value {
                ast::Value::SingleQuotedString(s)
                | ast::Value::DoubleQuotedString(s)
                | ast::Value::EscapedStringLiteral(s) => s.clone(),
                ast::Value::Number(n, _) => n.to_string(),
                ast::Value::Boolean(b) => if *b { "on" } else { "off" }.to_string(),
                other => other.to_string(),
            },
            ast::Expr::Identifier(id)
                if id.value.eq_ignore_ascii_case("default") && values.len() == 1 =>
            {
                return Ok(None)
            }
            ast::Expr::Identifier(id) => id.value.clone(),
            ast::Expr::UnaryOp {
                op: ast::UnaryOperator::Minus,
                expr,
            } => format!(
                "-{}",
                set_value_text(std::slice::from_ref(expr))?.unwrap_or_default()
            ),
            ast::Expr::CompoundIdentifier(ids) => ids
                .iter()
                .map(|i| i.value.as_str())
                .collect::<Vec<_>>()
                .join("."),
            other => other.to_string(),
        };
        parts.push(text);
    }
    Ok(Some(parts.join(", ")))
}

fn transaction_modes(modes: &[ast::TransactionMode]) -> Vec<(String, String)> {
    modes
        .iter()
        .map(|m| match m {
            ast::TransactionMode::IsolationLevel(level) => {
                let level = match level {
                    ast::TransactionIsolationLevel::ReadUncommitted => "read uncommitted",
                    ast::TransactionIsolationLevel::ReadCommitted => "read committed",
                    ast::TransactionIsolationLevel::RepeatableRead => "repeatable read",
                    ast::TransactionIsolationLevel::Serializable => "serializable",
                    _ => "serializable",
                };
                ("transaction_isolation".to_string(), level.to_string())
            }
            ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadOnly) => {
                ("transaction_read_only".into(), "on".into())
            }
            ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadWrite) => {
                ("transaction_read_only".into(), "off".into())
            }
        })
        .collect()
}

/// Plan one statement. `params` holds the parameter types from Parse and receives inferred ones.
/// `fold`: evaluate constant subexpressions now (simple protocol) or leave that to Bind
/// (extended protocol), matching where PostgreSQL reports errors such as `1/0`.
pub(crate) fn plan_statement(
    stmt: &Statement,
    catalog: &dyn table_plan::Catalog,
    params: &mut Vec<Type>,
    source: &str,
    text: &TextContext,
    fold: bool,
) -> Result<(Plan, Vec<(String, Type)>), PgError> {
    if let Statement::AlterTable(alter) = stmt {
        return plan_add_constraint(alter, catalog).map(|p| (p, Vec::new()));
    }
    if let Statement::Vacuum(_) = stmt {
        return Ok((Plan::Maintenance("VACUUM"), Vec::new()));
    }
    if let Statement::Analyze(_) = stmt {
        return Ok((Plan::Maintenance("ANALYZE"), Vec::new()));
    }
    if let Some(plan) = table_plan::plan_table_statement(stmt, catalog, params, source, text, fold)?
    {
        let columns = match &plan {
            TablePlan::Select(p) => p.columns.clone(),
            TablePlan::Insert(p) => p.returning_columns.clone(),
            TablePlan::Update(p) => p.returning_columns.clone(),
            TablePlan::Delete(p) => p.returning_columns.clone(),
            _ => Vec::new(),
        };
        return Ok((Plan::Table(Arc::new(plan)), columns));
    }
    let text_col = |name: &str| {
        vec![(
            name.to_string(),
            Type {
                scalar: Scalar::Text,
                array: false,
            },
        )]
    };
    Ok(match stmt {
        Statement::Query(query) => {
            let mut ctx = PlanCtx::new(params, source).with_text_context(text);
            if !fold {
                ctx = ctx.without_folding();
            }
            let select = expr::plan_const_select(query, &mut ctx)?;
            let columns = select.columns.clone();
            (Plan::Select(select), columns)
        }
        Statement::Set(set) => match set {
            ast::Set::SingleAssignment {
                scope,
                variable,
                values,
                ..
            } => {
                let local = matches!(scope, Some(ast::ContextModifier::Local));
                let name = variable.to_string();
                (
                    Plan::Set {
                        name,
                        value: set_value_text(values)?,
                        local,
                    },
                    vec![],
                )
            }
            ast::Set::SetTimeZone { local, value } => (
                Plan::Set {
                    name: "TimeZone".into(),
                    value: set_value_text(std::slice::from_ref(value))?,
                    local: *local,
                },
                vec![],
            ),
            ast::Set::SetNames { charset_name, .. } => (
                Plan::Set {
                    name: "client_encoding".into(),
                    value: Some(charset_name.value.clone()),
                    local: false,
                },
                vec![],
            ),
            ast::Set::SetTransaction {
                modes,
                session,
                snapshot: None,
            } => {
                let prefix = if *session { "default_" } else { "" };
                let sets = transaction_modes(modes);
                match sets.as_slice() {
                    [(name, value)] => (
                        Plan::Set {
                            name: format!("{prefix}{name}"),
                            value: Some(value.clone()),
                            local: !*session,
                        },
                        vec![],
                    ),
                    _ => return Err(unsupported("SET TRANSACTION with several modes")),
                }
            }
            _ => return Err(unsupported(&format!("\"{set}\""))),
        },
        Statement::ShowVariable { variable } => {
            let name = variable
                .iter()
                .map(|i| i.value.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let lower = name.to_ascii_lowercase();
            match lower.as_str() {
                "all" => (
                    Plan::ShowAll,
                    vec![
                        (
                            "name".to_string(),
                            Type {
                                scalar: Scalar::Text,
                                array: false,
                            },
                        ),
                        (
                            "setting".to_string(),
                            Type {
                                scalar: Scalar::Text,
                                array: false,
                            },
                        ),
                        (
                            "description".to_string(),
                            Type {
                                scalar: Scalar::Text,
                                array: false,
                            },
                        ),
                    ],
                ),
                "ringwire_stats" => {
                    // `psql` users' shortcut for the per-shard counters.
                    const SQL: &str = "SELECT * FROM ringwire.shard_stats";
                    let stmts =
                        Parser::parse_sql(&PostgreSqlDialect {}, SQL).expect("constant SQL parses");
                    return plan_statement(&stmts[0], catalog, params, SQL, text, fold);
                }
                "time zone" => (Plan::Show("TimeZone".into()), text_col("TimeZone")),
                "transaction isolation level" => (
                    Plan::Show("transaction_isolation".into()),
                    text_col("transaction_isolation"),
                ),
                _ => {
                    let column = Settings::canonical_name(&name)
                        .map(str::to_string)
                        .unwrap_or_else(|| lower.clone());
                    (Plan::Show(name), text_col(&column))
                }
            }
        }
        Statement::Reset(reset) => match &reset.reset {
            ast::Reset::ALL => (Plan::Reset(None), vec![]),
            ast::Reset::ConfigurationParameter(name) => {
                (Plan::Reset(Some(name.to_string())), vec![])
            }
            ast::Reset::SessionAuthorization => {
                (Plan::Reset(Some("session_authorization".into())), vec![])
            }
        },
        Statement::StartTransaction {
            modes,
            begin,
            statements,
            ..
        } if statements.is_empty() => (
            Plan::Begin {
                tag: if *begin { "BEGIN" } else { "START TRANSACTION" },
                modes: transaction_modes(modes),
            },
            vec![],
        ),
        Statement::Commit { chain: false, .. } => (Plan::Commit, vec![]),
        Statement::Rollback {
            chain: false,
            savepoint: None,
        } => (Plan::Rollback, vec![]),
        Statement::Discard {
            object_type: ast::DiscardObject::ALL,
        } => (Plan::DiscardAll, vec![]),
        Statement::Deallocate { name, .. } => {
            if name.value.eq_ignore_ascii_case("all") && name.quote_style.is_none() {
                (Plan::Deallocate(None), vec![])
            } else {
                (Plan::Deallocate(Some(name.value.clone())), vec![])
            }
        }
        Statement::LISTEN { channel } => (Plan::Listen(channel_name(channel)), vec![]),
        Statement::UNLISTEN { channel }
            if channel.value == "*" && channel.quote_style.is_none() =>
        {
            (Plan::Unlisten(None), vec![])
        }
        Statement::UNLISTEN { channel } => (Plan::Unlisten(Some(channel_name(channel))), vec![]),
        Statement::NOTIFY { channel, payload } => (
            Plan::Notify {
                channel: channel_name(channel),
                payload: payload.clone().unwrap_or_default(),
            },
            vec![],
        ),
        other => {
            let kind = other.to_string();
            let head: String = kind
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            return Err(unsupported(&head));
        }
    })
}

/// `ALTER TABLE t ADD [CONSTRAINT c] PRIMARY KEY (cols)` or `UNIQUE (cols)`, the forms pgbench
/// and schema migrations use; other ALTER TABLE forms are 0A000.
fn plan_add_constraint(
    alter: &ast::AlterTable,
    catalog: &dyn table_plan::Catalog,
) -> Result<Plan, PgError> {
    let name = alter
        .name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(ident_folded)
        .unwrap_or_default();
    let def = catalog.table(&name).ok_or_else(|| {
        PgError::new(
            SqlState::UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )
    })?;
    let [ast::AlterTableOperation::AddConstraint { constraint, .. }] = alter.operations.as_slice()
    else {
        return Err(unsupported("this ALTER TABLE form"));
    };
    let (constraint_name, columns, primary) = match constraint {
        ast::TableConstraint::PrimaryKey(pk) => (pk.name.as_ref(), &pk.columns, true),
        ast::TableConstraint::Unique(u) => (u.name.as_ref(), &u.columns, false),
        _ => return Err(unsupported("this ALTER TABLE constraint")),
    };
    let mut positions = Vec::with_capacity(columns.len());
    for c in columns {
        let ast::Expr::Identifier(id) = &c.column.expr else {
            return Err(unsupported("an expression in a constraint"));
        };
        let col = ident_folded(id);
        let at = def.column_index(&col).ok_or_else(|| {
            PgError::new(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{col}\" named in key does not exist"),
            )
        })?;
        positions.push(at);
    }
    if primary && def.primary_key.is_some() {
        return Err(PgError::new(
            SqlState(*b"42P16"),
            format!("multiple primary keys for table \"{name}\" are not allowed"),
        ));
    }
    let index_name = match constraint_name {
        Some(n) => ident_folded(n),
        None if primary => format!("{name}_pkey"),
        None => {
            let cols: Vec<&str> = positions
                .iter()
                .map(|&i| def.columns[i].name.as_str())
                .collect();
            format!("{name}_{}_key", cols.join("_"))
        }
    };
    Ok(Plan::AddConstraint {
        table: name,
        index: IndexDef {
            name: index_name,
            columns: positions,
            unique: true,
        },
        primary,
    })
}

/// `VACUUM ...` / `ANALYZE ...`, which sqlparser 0.63 does not parse in PostgreSQL's forms
/// (`vacuum analyze t`, as pgbench -i sends): accepted as no-ops — the compute compacts
/// versions itself and has no planner statistics.
pub(crate) fn maintenance_command(sql: &str) -> Option<&'static str> {
    let head = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()?
        .to_ascii_lowercase();
    let single = !sql.trim().trim_end_matches(';').contains(';');
    match head.as_str() {
        "vacuum" if single => Some("VACUUM"),
        "analyze" | "analyse" if single => Some("ANALYZE"),
        _ => None,
    }
}

fn ident_folded(id: &ast::Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// A channel named by an identifier: folded, and cut to 63 bytes as PostgreSQL's scanner cuts
/// every identifier (without its NOTICE).
fn channel_name(id: &ast::Ident) -> String {
    let mut name = ident_folded(id);
    if name.len() > notify::MAX_CHANNEL_BYTES {
        let mut end = notify::MAX_CHANNEL_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

fn is_transaction_exit(plan: &Plan) -> bool {
    matches!(plan, Plan::Commit | Plan::Rollback)
}

fn aborted() -> PgError {
    PgError::new(
        SqlState::IN_FAILED_SQL_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

fn warning(code: SqlState, message: &'static str) -> PgError {
    PgError {
        severity: Severity::Warning,
        ..PgError::new(code, message)
    }
}

/// RowDescription for `columns`; the field list is staged in the per-query arena.
fn write_row_description(
    columns: &[(String, Type)],
    formats: &[Format],
    arena: &Bump,
    out: &mut Vec<u8>,
) {
    let fields = bumpalo::collections::Vec::from_iter_in(
        columns
            .iter()
            .enumerate()
            .map(|(i, (name, ty))| FieldDescription {
                name,
                table_oid: 0,
                column_id: 0,
                type_oid: ty.oid(),
                type_len: ty.typlen(),
                type_modifier: -1,
                format: formats.get(i).copied().unwrap_or(Format::Text),
            }),
        arena,
    );
    backend::write_row_description(out, &fields);
}

/// Where a row-returning statement's rows go.
enum RowSink<'r> {
    /// Encode each row as a DataRow into the write buffer as it is produced (nothing staged).
    Write { formats: &'r [Format] },
    /// Keep the encoded DataRows aside: a portal executed with `max_rows` hands them out over
    /// several Executes.
    Encoded {
        buf: &'r mut Vec<u8>,
        formats: &'r [Format],
    },
}

/// The snapshots this shard holds (`oracle::Holds` slot `shard`): timestamp → how many
/// holders (open blocks, results produced in chunks). Its first key is what the shard
/// publishes. Shared (`Rc`) with the [`SnapshotHold`]s a portal keeps.
struct HeldSnapshots {
    shard: usize,
    shared: Arc<Shared>,
    held: RefCell<BTreeMap<Timestamp, u32>>,
}

impl HeldSnapshots {
    /// Hold the frontier this shard sees, published as held before it is used; retaken if a
    /// compaction passed it between the load and the hold. Returns the timestamp held.
    fn hold_frontier(&self, counters: &Counters) -> Timestamp {
        let mut held = self.held.borrow_mut();
        let oldest = held.keys().next().copied();
        let mut ts = self.shared.frontiers.read(self.shard);
        while !self.shared.holds.try_hold(self.shard, ts, oldest) {
            // A compaction passed this timestamp between the load and the hold: the frontier
            // is already past it.
            Counters::bump(&counters.oracle_misses);
            ts = self.shared.frontiers.read(self.shard);
        }
        *held.entry(ts).or_default() += 1;
        ts
    }

    /// Hold exactly `ts` (a timestamp just read at). False: the compute's compaction may
    /// already have passed it, and nothing is held.
    fn try_hold_at(&self, ts: Timestamp) -> bool {
        let mut held = self.held.borrow_mut();
        let oldest = held.keys().next().copied();
        if !self.shared.holds.try_hold(self.shard, ts, oldest) {
            // Put the slot back: a failed hold must not keep compaction (or a later block's
            // hold, which would trust it) at `ts`.
            self.shared.holds.release_to(self.shard, oldest);
            return false;
        }
        *held.entry(ts).or_default() += 1;
        true
    }

    /// One holder of `ts` is done with it.
    fn release(&self, ts: Timestamp) {
        let mut held = self.held.borrow_mut();
        let Some(count) = held.get_mut(&ts) else {
            debug_assert!(false, "released a snapshot at {ts} that was not held");
            return;
        };
        *count -= 1;
        if *count == 0 {
            held.remove(&ts);
            let oldest = held.keys().next().copied();
            self.shared.holds.release_to(self.shard, oldest);
        }
    }
}

/// A snapshot held for a result produced in chunks (one statement's, or a suspended
/// portal's); released when dropped, so a result that ends early — an error, a cancel, a
/// client that went away, a portal closed unfinished — never leaks it.
struct SnapshotHold {
    holds: Rc<HeldSnapshots>,
    ts: Timestamp,
}

impl SnapshotHold {
    /// Hold exactly `ts`, or None (see [`HeldSnapshots::try_hold_at`]).
    fn at(holds: &Rc<HeldSnapshots>, ts: Timestamp) -> Option<SnapshotHold> {
        holds.try_hold_at(ts).then(|| SnapshotHold {
            holds: holds.clone(),
            ts,
        })
    }

    /// Hold the shard's frontier.
    fn frontier(holds: &Rc<HeldSnapshots>, counters: &Counters) -> SnapshotHold {
        SnapshotHold {
            holds: holds.clone(),
            ts: holds.hold_frontier(counters),
        }
    }
}

impl Drop for SnapshotHold {
    fn drop(&mut self) {
        self.holds.release(self.ts);
    }
}

impl Frontend {
    /// Run one planned statement of a simple Query: RowDescription first (if it returns rows),
    /// then its rows and CommandComplete. If it fails, none of its output is sent.
    async fn run_simple(
        &self,
        cx: &mut Cx<'_, Self>,
        prepared: &Prepared,
        params: &[Value],
    ) -> Result<(), PgError> {
        if *cx.tx == TransactionStatus::Failed && !is_transaction_exit(&prepared.plan) {
            return Err(aborted());
        }
        if prepared.columns.is_empty() {
            // No RowDescription; a count-carrying tag (INSERT/UPDATE/DELETE) is still owed.
            if let Some(n) = self
                .run(cx, prepared, params, RowSink::Write { formats: &[] })
                .await?
            {
                write_select_tag(cx.out, &prepared.plan, n);
            }
            return Ok(());
        }
        let mark = cx.out.len();
        cx.out
            .extend_from_slice(prepared.text_row_description(cx.arena));
        match self
            .run(cx, prepared, params, RowSink::Write { formats: &[] })
            .await
        {
            Ok(rows) => {
                // None: the statement wrote its own CommandComplete (e.g. COPY TO).
                if let Some(n) = rows {
                    write_select_tag(cx.out, &prepared.plan, n);
                }
                Ok(())
            }
            Err(e) => {
                cx.out.truncate(mark);
                Err(e)
            }
        }
    }

    /// COMMIT (`commit`) or ROLLBACK: end the block at the compute and in the settings.
    /// Returns the tag; COMMIT of a failed block rolls back, as in PostgreSQL.
    async fn end_block(
        &self,
        cx: &mut Cx<'_, Self>,
        commit: bool,
    ) -> Result<&'static str, PgError> {
        let commit = commit && *cx.tx != TransactionStatus::Failed;
        if *cx.tx == TransactionStatus::Idle || std::mem::take(&mut cx.session.implicit) {
            let e = warning(
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                "there is no transaction in progress",
            );
            backend::write_notice(cx.out, &e);
        }
        let session = &mut *cx.session;
        if let Some(block) = session.block.take() {
            if block.wrote {
                let request = if commit {
                    Request::Commit { tx: block.tx }
                } else {
                    Request::Abort { tx: block.tx }
                };
                let ended = self.dispatcher.call(request).await;
                self.release_snapshot(block.hold);
                ended?;
            } else {
                self.release_snapshot(block.hold);
            }
        }
        session
            .settings
            .end_transaction(commit, &mut session.reports);
        self.end_notify(session, commit);
        session.transaction_started_us = None;
        *cx.tx = TransactionStatus::Idle;
        Ok(if commit { "COMMIT" } else { "ROLLBACK" })
    }

    /// The session's transaction ended: apply its LISTENs and send its NOTIFYs to every shard
    /// (this one's listeners at once) if it committed, forget both if not.
    fn end_notify(&self, session: &mut Session, commit: bool) {
        let ended = self
            .listeners
            .end_transaction(&mut session.notify, session.process_id, commit);
        if let Some(batch) = ended {
            let here = self.dispatcher.shard_id;
            for shard in (0..self.dispatcher.shards()).filter(|&s| s != here) {
                self.dispatcher.send(shard, Message::Notify(batch.clone()));
            }
            self.listeners.deliver(&batch);
        }
    }

    /// The first table statement of a block fixes (or, when serializable, bounds) its
    /// snapshot, and holds it against compaction until the block ends.
    fn begin_block(&self, session: &mut Session, in_block: bool) {
        if in_block && session.block.is_none() {
            let hold = self.hold_snapshot();
            let snapshot = match session.settings.isolation() {
                Isolation::StrictSerializable => {
                    Counters::bump(&self.dispatcher.counters.oracle_hits);
                    Some(hold)
                }
                Isolation::Serializable => None,
            };
            session.block = Some(Block {
                snapshot,
                hold,
                tx: self.new_tx(),
                wrote: false,
            });
        }
    }

    /// What a SELECT starting now reads: its block's snapshot (and intents, once the block
    /// wrote), or outside a block the shard's frontier (strict) or the latest commit
    /// (serializable).
    fn select_read(&self, session: &Session) -> ReadSpec {
        let counters = &self.dispatcher.counters;
        let read = match session.block {
            Some(b) => ReadSpec {
                at: b.snapshot.map_or(ReadAt::Latest, ReadAt::Snapshot),
                tx: b.wrote.then_some(b.tx),
            },
            None => ReadSpec {
                at: match session.settings.isolation() {
                    Isolation::StrictSerializable => {
                        Counters::bump(&counters.oracle_hits);
                        ReadAt::Frontier(self.shared.frontiers.read(self.dispatcher.shard_id))
                    }
                    Isolation::Serializable => ReadAt::Latest,
                },
                tx: None,
            },
        };
        if read.at == ReadAt::Latest {
            Counters::bump(&counters.latest_reads);
        }
        read
    }

    /// Run a statement over tables at the compute. Returns the row count for statements whose
    /// tag carries one (SELECT, INSERT/UPDATE/DELETE), None when it wrote its own tag.
    ///
    /// A SELECT on the compute shard is a function call that encodes rows straight into the
    /// connection's buffer; from another shard it travels in a batch with inline parameters
    /// and a lent reply buffer. Either way a cached point select allocates nothing.
    async fn run_table(
        &self,
        cx: &mut Cx<'_, Self>,
        plan: &Arc<TablePlan>,
        params: &[Value],
        sink: RowSink<'_>,
        mark: usize,
    ) -> Result<Option<u64>, PgError> {
        let in_block = *cx.tx != TransactionStatus::Idle;
        let can_flush = cx.can_flush();
        let session = &mut *cx.session;
        session.start_statement(cx.clock);
        if written_table(plan).is_some_and(stats::is_virtual) {
            return Err(PgError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                "the ringwire.* relations are read-only",
            ));
        }
        if session.settings.read_only() {
            if let Some(command) = write_command(plan) {
                return Err(read_only_error(command));
            }
        }
        self.begin_block(session, in_block);
        let (formats, mut encoded): (&[Format], Option<&mut Vec<u8>>) = match sink {
            RowSink::Write { formats } => (formats, None),
            RowSink::Encoded { buf, formats } => (formats, Some(buf)),
        };
        let answer = match &**plan {
            TablePlan::Select(select) | TablePlan::CopyTo { source: select, .. } => {
                let read = self.select_read(session);
                let copy = matches!(&**plan, TablePlan::CopyTo { .. });
                // A result that can come in chunks does, when the connection lent its socket
                // and the rows go straight to it: each chunk is flushed (waiting while the
                // client does not read) before the next is produced.
                let gathered =
                    stats::is_gathered(select.table) || select.table == stats::TABLE_STATS_ID;
                let mut cursor = (!gathered
                    && (encoded.is_none() || copy)
                    && can_flush
                    && exec::streams(select))
                .then(ScanCursor::default);
                if copy {
                    // PostgreSQL's CopyOutResponse says "text" (0) for CSV too.
                    backend::write_copy_response(cx.out, b'H', Format::Text, select.columns.len());
                }
                // COPY's CopyData follows its CopyOutResponse in the write buffer; rows of a
                // portal run with `max_rows` are staged aside.
                let target: &mut Vec<u8> = match encoded.as_deref_mut() {
                    Some(buf) if !copy => buf,
                    _ => &mut *cx.out,
                };
                let rows_from = target.len();
                // (rows, the timestamp read at; None for the counters, which are not versioned)
                let peeked = if gathered && stats::is_gathered(select.table) {
                    self.shard_stats(session, plan, params, formats, target)
                        .await
                        .map(|n| (n, None))
                } else {
                    self.peek_chunk(
                        session,
                        plan,
                        params,
                        read,
                        formats,
                        target,
                        cursor.as_mut(),
                    )
                    .await
                    .map(|(n, ts)| (n, Some(ts)))
                };
                let peeked = match (peeked, cursor) {
                    (Ok((n, Some(ts))), Some(c)) if !c.done => {
                        let first = (n, ts, rows_from);
                        self.stream_rest(cx, plan, params, read, formats, c, first)
                            .await
                            .map(|(n, ts)| (n, Some(ts)))
                    }
                    (peeked, _) => peeked,
                };
                let session = &mut *cx.session;
                let (count, ts) = peeked.inspect_err(|_| cx.out.truncate(mark))?;
                if let (Some(block), Some(ts)) = (session.block.as_mut(), ts) {
                    if block.snapshot.is_none() {
                        // A serializable block's first read: it keeps the timestamp it got.
                        debug_assert!(ts >= block.hold, "snapshot {ts} below its hold");
                        block.snapshot = Some(ts);
                    }
                }
                if !copy {
                    return Ok(Some(count));
                }
                backend::write_copy_done(cx.out);
                write_count_tag(cx.out, "COPY", count);
                return Ok(None);
            }
            TablePlan::Insert(_)
            | TablePlan::Update(_)
            | TablePlan::Delete(_)
            | TablePlan::Truncate { .. } => {
                let (tx, autocommit) = match &mut session.block {
                    Some(b) => {
                        b.wrote = true;
                        (b.tx, false)
                    }
                    None => (self.new_tx(), true),
                };
                let request = Request::Write {
                    tx,
                    plan: plan.clone(),
                    params: params.iter().cloned().collect(),
                    copy_rows: Vec::new(),
                    session: session.peek_session(),
                    stamps: session.stamps,
                    formats: formats.iter().copied().collect(),
                    autocommit,
                };
                // A lock wait ends when the statement is cancelled or times out.
                self.dispatcher
                    .call_cancellable(request, tx, cx.cancel)
                    .await
            }
            TablePlan::CopyFrom { columns, .. } => {
                if !session.in_simple_query {
                    return Err(PgError::new(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        "COPY FROM STDIN is supported by ringwire only in a simple Query",
                    ));
                }
                // The data comes next; `copy_in_done` applies it.
                backend::write_copy_response(cx.out, b'G', Format::Text, columns.len());
                session.pending_copy = Some(plan.clone());
                *cx.copy_in = true;
                return Ok(None);
            }
            TablePlan::CreateTable { .. }
            | TablePlan::CreateIndex { .. }
            | TablePlan::DropTable { .. }
            | TablePlan::DropIndex { .. } => {
                let tx = self.ddl_tx(session);
                let request = Request::Ddl {
                    tx,
                    plan: plan.clone(),
                };
                // Waiting for a table's writers ends at cancel or timeout, as a write's does.
                self.dispatcher
                    .call_cancellable(request, tx, cx.cancel)
                    .await
            }
        };
        let answer = answer.inspect_err(|_| cx.out.truncate(mark))?;
        for notice in &answer.notices {
            backend::write_notice(cx.out, notice);
        }
        let tag = match &**plan {
            TablePlan::Insert(_) | TablePlan::Update(_) | TablePlan::Delete(_) => {
                match encoded.as_mut() {
                    Some(buf) => buf.extend_from_slice(&answer.rows),
                    None => cx.out.extend_from_slice(&answer.rows),
                }
                return Ok(Some(answer.count));
            }
            TablePlan::Truncate { .. } => "TRUNCATE TABLE",
            TablePlan::CreateTable { .. } => "CREATE TABLE",
            TablePlan::CreateIndex { .. } => "CREATE INDEX",
            TablePlan::DropTable { .. } => "DROP TABLE",
            TablePlan::DropIndex { .. } => "DROP INDEX",
            TablePlan::Select(_) | TablePlan::CopyTo { .. } | TablePlan::CopyFrom { .. } => {
                unreachable!("answered above")
            }
        };
        backend::write_command_complete(cx.out, tag);
        Ok(None)
    }

    /// One peek of a SELECT (or COPY TO) plan, wherever it can run: the compute when it is on
    /// this shard (a function call), else this shard's replica when it may serve the read,
    /// else a request to the compute. With `chunk`, one chunk of a result produced in chunks
    /// (all three places run the same resumable scan over the same row ids).
    #[allow(clippy::too_many_arguments)]
    async fn peek_chunk(
        &self,
        session: &mut Session,
        plan: &Arc<TablePlan>,
        params: &[Value],
        read: ReadSpec,
        formats: &[Format],
        target: &mut Vec<u8>,
        chunk: Option<&mut ScanCursor>,
    ) -> Result<(u64, Timestamp), PgError> {
        let counters = &self.dispatcher.counters;
        if let Some(compute) = &self.dispatcher.compute {
            Counters::bump(&counters.direct_requests);
            session.refresh_peek_session();
            let info = StatementSession {
                session: &session.peek_session,
                stamps: session.stamps,
            };
            return compute.peek_into(plan, params, read, &info, formats, target, chunk);
        }
        let mut chunk = chunk;
        if let Some(local) = self
            .replica_read(
                session,
                plan,
                params,
                read,
                formats,
                target,
                chunk.as_deref_mut(),
            )
            .await
        {
            return local;
        }
        let request = Request::Peek {
            plan: plan.clone(),
            params: params.iter().cloned().collect(),
            read,
            session: session.peek_session(),
            stamps: session.stamps,
            formats: formats.iter().copied().collect(),
            rows: self.dispatcher.rows_buffer(),
            cursor: chunk.as_deref().copied(),
        };
        let answer = self.dispatcher.call(request).await?;
        target.extend_from_slice(&answer.rows);
        if let (Some(c), Some(after)) = (chunk, answer.cursor) {
            *c = after;
        }
        let done = (answer.count, answer.ts);
        self.dispatcher.recycle_rows(answer.rows);
        Ok(done)
    }

    /// The rest of a result whose first chunk (`first`: its row count, the timestamp it read
    /// at, where its rows start in `cx.out`) did not finish it: hold that timestamp against
    /// compaction, then send each chunk before producing the next, so the statement holds at
    /// most one chunk however slowly its client reads. Returns the row count of the whole
    /// result and the timestamp it read at.
    ///
    /// The hold is taken after the first chunk so that results that fit in one chunk (nearly
    /// all) never take one. If compaction passed `ts` meanwhile (the first chunk travelled
    /// back from another shard's compute while it compacted), the first chunk is dropped,
    /// unsent, and the result starts over at a held snapshot of the frontier — a state current
    /// while the statement runs, so reads stay strict serializable. Between chunks the
    /// statement yields to the shard's other tasks and ends with 57014 if cancelled or timed
    /// out. The hold is released when the statement ends in any way, the future being dropped
    /// included (`SnapshotHold`).
    #[allow(clippy::too_many_arguments)]
    async fn stream_rest(
        &self,
        cx: &mut Cx<'_, Self>,
        plan: &Arc<TablePlan>,
        params: &[Value],
        read: ReadSpec,
        formats: &[Format],
        mut cursor: ScanCursor,
        first: (u64, Timestamp, usize),
    ) -> Result<(u64, Timestamp), PgError> {
        let (mut count, ts, rows_from) = first;
        let (hold, ts) = match SnapshotHold::at(&self.held, ts) {
            Some(hold) => (hold, ts),
            None => {
                cx.out.truncate(rows_from);
                count = 0;
                let hold = SnapshotHold::frontier(&self.held, &self.dispatcher.counters);
                cursor = ScanCursor::default();
                let again = ReadSpec {
                    at: ReadAt::Snapshot(hold.ts),
                    tx: read.tx,
                };
                let (n, _) = self
                    .peek_chunk(
                        cx.session,
                        plan,
                        params,
                        again,
                        formats,
                        cx.out,
                        Some(&mut cursor),
                    )
                    .await?;
                count += n;
                let ts = hold.ts;
                (hold, ts)
            }
        };
        let at = ReadSpec {
            at: ReadAt::Snapshot(ts),
            tx: read.tx,
        };
        while !cursor.done {
            cx.flush_out().await?;
            futures_lite::future::yield_now().await;
            cx.cancel.check()?;
            let (n, _) = self
                .peek_chunk(
                    cx.session,
                    plan,
                    params,
                    at,
                    formats,
                    cx.out,
                    Some(&mut cursor),
                )
                .await?;
            count += n;
        }
        drop(hold);
        Ok((count, ts))
    }

    /// The table plan a prepared statement runs (its folded form once Bind folded it).
    fn table_plan(prepared: &Prepared) -> Result<Option<&Arc<TablePlan>>, PgError> {
        let Plan::Table(planned) = &prepared.plan else {
            return Ok(None);
        };
        Ok(Some(match prepared.folded.get() {
            Some(Ok(Folded::Table(folded))) => folded,
            Some(Err(e)) => return Err(e.clone()),
            _ => planned,
        }))
    }

    /// Whether a portal executed with a row limit can resume a scan across Executes instead
    /// of materializing its result: a plain SELECT that streams, on a connection that lent its
    /// socket, and not in a block that wrote (its intents would change under the portal,
    /// which must keep seeing the state it started at, as PostgreSQL's portals do).
    fn portal_streams(&self, cx: &Cx<'_, Self>, prepared: &Prepared) -> bool {
        let Ok(Some(plan)) = Self::table_plan(prepared) else {
            return false;
        };
        let TablePlan::Select(select) = &**plan else {
            return false;
        };
        cx.can_flush()
            && *cx.tx != TransactionStatus::Failed
            && !stats::is_gathered(select.table)
            && select.table != stats::TABLE_STATS_ID
            && exec::streams(select)
            && cx.session.block.is_none_or(|b| !b.wrote)
    }

    /// Execute a portal that resumes its scan (`portal_streams`) for at most `max_rows` rows
    /// (0: the rest).
    /// Like PostgreSQL, it suspends whenever the row limit is reached without looking ahead,
    /// so a portal whose last row was just sent completes on the next Execute with
    /// "SELECT 0".
    async fn execute_scan(
        &self,
        cx: &mut Cx<'_, Self>,
        portal: &mut Portal,
        max_rows: u32,
    ) -> Result<Execution, PgError> {
        if *cx.tx == TransactionStatus::Failed {
            return Err(aborted());
        }
        let statement = portal.statement.clone();
        let plan = Self::table_plan(&statement)?
            .expect("portal_streams checked the plan")
            .clone();
        // Every Execute is a statement start, a resumed portal's too (its rows see the new
        // statement_timestamp(), and its transaction's now(), as in PostgreSQL).
        cx.session.start_statement(cx.clock);
        if portal.scan.is_none() {
            let in_block = *cx.tx != TransactionStatus::Idle;
            self.begin_block(cx.session, in_block);
            let read = self.select_read(cx.session);
            portal.scan = Some(PortalScan {
                cursor: ScanCursor::default(),
                read,
                hold: None,
            });
        }
        let scan = portal.scan.as_mut().expect("set above");
        let from = scan.cursor.produced;
        let pause_at = if max_rows == 0 {
            u64::MAX
        } else {
            from + u64::from(max_rows)
        };
        scan.cursor.pause_at = (max_rows != 0).then_some(pause_at);
        let mark = cx.out.len();
        while !scan.cursor.done && scan.cursor.produced < pause_at {
            let (_, ts) = self
                .peek_chunk(
                    cx.session,
                    &plan,
                    &portal.params,
                    scan.read,
                    &portal.formats,
                    cx.out,
                    Some(&mut scan.cursor),
                )
                .await?;
            if let Some(block) = cx.session.block.as_mut() {
                if block.snapshot.is_none() {
                    // A serializable block's first read: it keeps the timestamp it got.
                    block.snapshot = Some(ts);
                }
            }
            if scan.hold.is_none() && !scan.cursor.done {
                // More rows to come, in this Execute or a later one: hold what they read.
                if let Some(hold) = SnapshotHold::at(&self.held, ts) {
                    scan.hold = Some(hold);
                    scan.read.at = ReadAt::Snapshot(ts);
                } else {
                    // Compaction passed `ts` before the hold (only after the portal's first
                    // chunk, before anything was sent): start over at a held frontier.
                    debug_assert_eq!(from, 0, "a portal resumed without its hold");
                    cx.out.truncate(mark);
                    let hold = SnapshotHold::frontier(&self.held, &self.dispatcher.counters);
                    scan.read.at = ReadAt::Snapshot(hold.ts);
                    scan.hold = Some(hold);
                    scan.cursor = ScanCursor {
                        pause_at: (max_rows != 0).then_some(pause_at),
                        ..ScanCursor::default()
                    };
                    continue;
                }
            }
            if scan.cursor.done || scan.cursor.produced == pause_at {
                break;
            }
            cx.flush_out().await?;
            futures_lite::future::yield_now().await;
            cx.cancel.check()?;
        }
        let sent = scan.cursor.produced - from;
        if max_rows != 0 && sent == u64::from(max_rows) {
            return Ok(Execution::Suspended);
        }
        scan.hold = None;
        portal.done = true;
        write_select_tag(cx.out, &statement.plan, sent);
        Ok(Execution::Complete)
    }

    /// A read served by this shard's replica, when there is one and it provably holds (or,
    /// once caught up, will hold) what the read must see (`crate::replica`): no message, rows
    /// written straight into `out`. None: the read goes to the compute.
    #[allow(clippy::too_many_arguments)]
    async fn replica_read(
        &self,
        session: &mut Session,
        plan: &TablePlan,
        params: &[Value],
        read: ReadSpec,
        formats: &[Format],
        out: &mut Vec<u8>,
        chunk: Option<&mut ScanCursor>,
    ) -> Option<Result<(u64, Timestamp), PgError>> {
        self.dispatcher.replica.as_ref()?;
        session.refresh_peek_session();
        let info = StatementSession {
            session: &session.peek_session,
            stamps: session.stamps,
        };
        self.dispatcher
            .replica_peek(plan, params, read, &info, formats, out, chunk)
            .await
    }

    /// `SELECT ... FROM ringwire.shard_stats`: every shard's counters, gathered over the mesh,
    /// queried here. Appends the rows to `out`.
    async fn shard_stats(
        &self,
        session: &mut Session,
        plan: &TablePlan,
        params: &[Value],
        formats: &[Format],
        out: &mut Vec<u8>,
    ) -> Result<u64, PgError> {
        let gathered = self
            .dispatcher
            .gather_stats(Some(self.local_stats()), dispatch::STATS_TIMEOUT)
            .await;
        if !gathered.missing.is_empty() {
            log::warn!(
                "shard {}: shards {:?} did not send their stats within {:?}; answering without them",
                self.dispatcher.shard_id,
                gathered.missing,
                dispatch::STATS_TIMEOUT
            );
        }
        let all = gathered.stats;
        let (def, rows) = if plan_table(plan) == Some(stats::LATENCY_ID) {
            let mut rows: Vec<Vec<Value>> = all
                .iter()
                .flat_map(|s| s.latency_rows(Some(s.shard)))
                .collect();
            if let Some(merged) = stats::merge(&all) {
                rows.extend(merged.latency_rows(None));
            }
            (stats::relation("latency"), rows)
        } else {
            (
                stats::relation("shard_stats"),
                all.iter().map(ShardStats::row).collect(),
            )
        };
        let def = def.expect("a ringwire relation");
        let table = dispatch::virtual_table(def, rows);
        session.refresh_peek_session();
        let info = StatementSession {
            session: &session.peek_session,
            stamps: session.stamps,
        };
        let mark = out.len();
        dispatch::run_select(
            &table,
            plan,
            params,
            View::LATEST,
            &info,
            formats,
            out,
            None,
        )
        .inspect_err(|_| out.truncate(mark))
    }

    /// Run a planned statement to completion (rows included), writing everything but the
    /// RowDescription (simple protocol writes that first; extended writes it at Describe).
    async fn run(
        &self,
        cx: &mut Cx<'_, Self>,
        prepared: &Prepared,
        params: &[Value],
        mut sink: RowSink<'_>,
    ) -> Result<Option<u64>, PgError> {
        let session = &mut *cx.session;
        if *cx.tx == TransactionStatus::Failed && !is_transaction_exit(&prepared.plan) {
            return Err(aborted());
        }
        let in_block = *cx.tx != TransactionStatus::Idle;
        let mark = cx.out.len();
        let mut emit = |row: &[Value], out: &mut Vec<u8>, ctx: &TextContext| match &mut sink {
            RowSink::Write { formats } => write_data_row(row, &prepared.columns, formats, ctx, out),
            RowSink::Encoded { buf, formats } => {
                write_data_row(row, &prepared.columns, formats, ctx, buf)
            }
        };
        let tag: &str = match &prepared.plan {
            Plan::Empty => {
                backend::write_empty_query_response(cx.out);
                return Ok(None);
            }
            Plan::Table(planned) => {
                let plan = match prepared.folded.get() {
                    Some(Ok(Folded::Table(folded))) => folded,
                    Some(Err(e)) => return Err(e.clone()),
                    _ => planned,
                };
                return self.run_table(cx, plan, params, sink, mark).await;
            }
            Plan::Select(planned) => {
                let select = match prepared.folded.get() {
                    Some(Ok(Folded::Const(folded))) => folded,
                    Some(Err(e)) => return Err(e.clone()),
                    _ => planned,
                };
                session.start_statement(cx.clock);
                let session = &*session;
                let ctx = session.settings.text_context();
                let out = &mut *cx.out;
                let mut env = EvalEnv {
                    params,
                    row: &[],
                    session,
                    sleep_us: 0,
                    notifies: Vec::new(),
                };
                let produced = select.eval_rows(&mut env, &mut |row: &[Value]| {
                    emit(row, out, ctx);
                    Ok(())
                });
                let notifies = std::mem::take(&mut env.notifies);
                let produced = match produced {
                    Ok(n) if env.sleep_us > 0 => cx
                        .cancel
                        .sleep(Duration::from_micros(env.sleep_us))
                        .await
                        .map(|()| n),
                    other => other,
                };
                if produced.is_ok() {
                    for (channel, payload) in notifies {
                        cx.session.notify.pending.notify(channel, payload);
                    }
                }
                // A statement that fails sends none of its rows.
                return produced.map(Some).inspect_err(|_| cx.out.truncate(mark));
            }
            Plan::Show(name) => {
                let value = session.settings.get(name).ok_or_else(|| {
                    PgError::new(
                        SqlState::UNDEFINED_OBJECT,
                        format!("unrecognized configuration parameter \"{name}\""),
                    )
                })?;
                emit(
                    &[Value::Text(value.to_string())],
                    cx.out,
                    session.settings.text_context(),
                );
                return Ok(Some(1));
            }
            Plan::ShowAll => {
                let ctx = session.settings.text_context();
                let mut n = 0;
                for (name, value, description) in session.settings.all() {
                    let row = [
                        Value::Text(name.to_string()),
                        Value::Text(value.to_string()),
                        Value::Text(description.to_string()),
                    ];
                    emit(&row, cx.out, ctx);
                    n += 1;
                }
                return Ok(Some(n));
            }
            Plan::Set { name, value, local } => {
                if session.block.is_some() && name.eq_ignore_ascii_case("transaction_isolation") {
                    return Err(PgError::new(
                        SqlState::ACTIVE_SQL_TRANSACTION,
                        "SET TRANSACTION ISOLATION LEVEL must be called before any query",
                    ));
                }
                if *local && !in_block {
                    backend::write_notice(
                        cx.out,
                        &warning(
                            SqlState::NO_ACTIVE_SQL_TRANSACTION,
                            "SET LOCAL can only be used in transaction blocks",
                        ),
                    );
                }
                session.settings.set(
                    name,
                    value.as_deref(),
                    *local,
                    in_block,
                    &mut session.reports,
                )?;
                "SET"
            }
            Plan::Maintenance(tag) => tag,
            Plan::AddConstraint {
                table,
                index,
                primary,
            } => {
                if session.settings.read_only() {
                    return Err(read_only_error("ALTER TABLE"));
                }
                let tx = self.ddl_tx(session);
                let request = Request::AddIndex {
                    tx,
                    table: table.clone(),
                    index: index.clone(),
                    primary: *primary,
                };
                self.dispatcher
                    .call_cancellable(request, tx, cx.cancel)
                    .await?;
                "ALTER TABLE"
            }
            Plan::Reset(None) => {
                session.settings.reset_all(&mut session.reports);
                "RESET"
            }
            Plan::Reset(Some(name)) => {
                session
                    .settings
                    .set(name, None, false, in_block, &mut session.reports)?;
                "RESET"
            }
            Plan::Begin { tag, modes } => {
                if session.implicit {
                    // As in PostgreSQL, the Query's implicit transaction, with what ran in
                    // it so far, becomes the block.
                    session.implicit = false;
                } else if in_block {
                    backend::write_notice(
                        cx.out,
                        &warning(
                            SqlState::ACTIVE_SQL_TRANSACTION,
                            "there is already a transaction in progress",
                        ),
                    );
                } else {
                    *cx.tx = TransactionStatus::InBlock;
                    // The block's now() is BEGIN's time (or its implicit transaction's).
                    session.start_statement(cx.clock);
                }
                for (name, value) in modes {
                    session
                        .settings
                        .set(name, Some(value), true, true, &mut session.reports)?;
                }
                tag
            }
            Plan::Commit => self.end_block(cx, true).await?,
            Plan::Rollback => self.end_block(cx, false).await?,
            Plan::DiscardAll => {
                if in_block {
                    return Err(PgError::new(
                        SqlState::ACTIVE_SQL_TRANSACTION,
                        "DISCARD ALL cannot run inside a transaction block",
                    ));
                }
                session.settings.reset_all(&mut session.reports);
                // DISCARD ALL includes UNLISTEN * (a pooler's reset must stop deliveries).
                session.notify.pending.unlisten(None);
                cx.statements.clear();
                *cx.close_all_portals = true;
                "DISCARD ALL"
            }
            Plan::Deallocate(None) => {
                cx.statements.clear();
                "DEALLOCATE ALL"
            }
            Plan::Listen(channel) => {
                session.notify.pending.listen(channel);
                "LISTEN"
            }
            Plan::Unlisten(channel) => {
                session.notify.pending.unlisten(channel.as_deref());
                "UNLISTEN"
            }
            Plan::Notify { channel, payload } => {
                notify::check(channel, payload)?;
                session
                    .notify
                    .pending
                    .notify(channel.clone(), payload.clone());
                "NOTIFY"
            }
            Plan::Deallocate(Some(name)) => {
                if !cx.statements.remove(name) {
                    return Err(PgError::new(
                        SqlState::INVALID_SQL_STATEMENT_NAME,
                        format!("prepared statement \"{name}\" does not exist"),
                    ));
                }
                "DEALLOCATE"
            }
        };
        backend::write_command_complete(cx.out, tag);
        Ok(None)
    }

    fn prepare(
        &self,
        stmt: Option<&Statement>,
        mut param_types: Vec<Type>,
        source: &str,
        text: &TextContext,
        fold: bool,
    ) -> Result<Prepared, PgError> {
        let Some(stmt) = stmt else {
            return Ok(Prepared::new(Plan::Empty, param_types, vec![]));
        };
        let (plan, columns) =
            plan_statement(stmt, &*self.catalog(), &mut param_types, source, text, fold)?;
        for t in param_types.iter_mut() {
            if t.scalar == Scalar::Unknown {
                // PostgreSQL resolves a parameter nothing constrains to text.
                t.scalar = Scalar::Text;
            }
        }
        Ok(Prepared::new(plan, param_types, columns))
    }
}

/// CommandComplete for a finished row-returning statement.
fn write_select_tag(out: &mut Vec<u8>, plan: &Plan, rows: u64) {
    let verb = match plan {
        Plan::Show(_) | Plan::ShowAll => {
            backend::write_command_complete(out, "SHOW");
            return;
        }
        Plan::Table(p) => match &**p {
            TablePlan::Insert(_) => "INSERT 0",
            TablePlan::Update(_) => "UPDATE",
            TablePlan::Delete(_) => "DELETE",
            TablePlan::CopyFrom { .. } | TablePlan::CopyTo { .. } => "COPY",
            _ => "SELECT",
        },
        _ => "SELECT",
    };
    write_count_tag(out, verb, rows);
}

/// CommandComplete `"<verb> <rows>"`, formatted on the stack: the per-query path does not
/// allocate for its tag.
fn write_count_tag(out: &mut Vec<u8>, verb: &str, rows: u64) {
    // Once per statement: `itoa`, not `write!`, whose formatting machinery was ~2% of a
    // shard's CPU for point selects (perf, 4 connections).
    let mut digits = itoa::Buffer::new();
    backend::write_command_complete_parts(out, verb, digits.format(rows));
}

impl Frontend {
    async fn simple_query_inner(&self, cx: &mut Cx<'_, Self>, sql: &str) -> Result<(), PgError> {
        self.refresh_catalog();
        let tz = &cx.session.settings.text_context().time_zone;
        let cached = self.plans.borrow().get_simple(sql, false, tz);
        if let Some(prepared) = cached {
            self.plans.borrow_mut().count(true);
            return self.run_simple(cx, &prepared, &[]).await;
        }
        if let Some(done) = self.run_lifted(cx, sql).await {
            return done;
        }
        self.plans.borrow_mut().count(false);
        if let Some(tag) = maintenance_command(sql) {
            if *cx.tx != TransactionStatus::Idle && tag == "VACUUM" {
                return Err(PgError::new(
                    SqlState::ACTIVE_SQL_TRANSACTION,
                    "VACUUM cannot run inside a transaction block",
                ));
            }
            backend::write_command_complete(cx.out, tag);
            return Ok(());
        }
        let statements = parse_sql(sql)?;
        if statements.is_empty() {
            backend::write_empty_query_response(cx.out);
            return Ok(());
        }
        // Several statements in one Query run in one transaction, as in PostgreSQL: an error
        // in one undoes those before it (unless a COMMIT came between).
        let implicit = statements.len() > 1;
        self.run_statements(cx, sql, &statements, implicit).await
    }

    /// End the implicit transaction (`Session::implicit`) if one is open: commit it unless
    /// `failed` or the block failed, else roll it back.
    async fn end_implicit(&self, cx: &mut Cx<'_, Self>, failed: bool) -> Result<(), PgError> {
        if !std::mem::take(&mut cx.session.implicit) {
            return Ok(());
        }
        // (Ended here, it is no COMMIT of the client's: no warning.)
        let ended = self.end_block(cx, !failed).await.map(|_| ());
        if ended.is_err() {
            // The client never opened a block: whatever failed, it is not left in one
            // (`end_of_cycle` drops the transaction's settings and notifications).
            *cx.tx = TransactionStatus::Idle;
        }
        ended
    }

    /// The statements of one Query, in turn; `implicit`: each that starts outside a block
    /// opens the Query's implicit transaction (`Session::implicit`).
    async fn run_statements(
        &self,
        cx: &mut Cx<'_, Self>,
        sql: &str,
        statements: &[Statement],
        implicit: bool,
    ) -> Result<(), PgError> {
        for stmt in statements {
            // In a failed transaction only COMMIT/ROLLBACK run; don't even plan the rest.
            if *cx.tx == TransactionStatus::Failed
                && !matches!(stmt, Statement::Commit { .. } | Statement::Rollback { .. })
            {
                return Err(aborted());
            }
            let text = cx.session.settings.text_context();
            let prepared = Rc::new(self.prepare(Some(stmt), Vec::new(), sql, text, true)?);
            if !prepared.param_types.is_empty() {
                return Err(PgError::new(
                    SqlState(*b"42P02"),
                    "there is no parameter $1",
                ));
            }
            if statements.len() == 1 {
                self.plans
                    .borrow_mut()
                    .put_simple(sql, false, prepared.clone(), &text.time_zone);
            }
            if changes_catalog(&prepared) {
                // (DDL runs on its own: `changes_catalog`.)
                self.end_implicit(cx, false).await?;
            } else if implicit && *cx.tx == TransactionStatus::Idle {
                *cx.tx = TransactionStatus::InBlock;
                cx.session.implicit = true;
            }
            self.run_simple(cx, &prepared, &[]).await?;
        }
        Ok(())
    }

    /// A simple Query whose literals can be lifted into parameters (see `sql::lift`): run
    /// with the plan cached for its lifted text, planning that once. None: not liftable, or the
    /// lifted text does not plan as a table statement with exactly those parameters — then the
    /// text is planned as written, with the errors and positions PostgreSQL gives it. Nothing
    /// here uses the global allocator on a hit for integer literals: the lifted text is built
    /// in the query's arena and the values travel inline.
    async fn run_lifted(&self, cx: &mut Cx<'_, Self>, sql: &str) -> Option<Result<(), PgError>> {
        if *cx.tx == TransactionStatus::Failed {
            return None;
        }
        let mut lifted = bumpalo::collections::String::new_in(cx.arena);
        let mut literals: SmallVec<[Literal<'_>; 4]> = SmallVec::new();
        if !lift::lift(sql, &mut lifted, &mut literals) {
            return None;
        }
        // The key also says which parameters are int4 and which unknown: `name = 5` and
        // `name = '5'` type differently (the first is 42883 on a text column).
        let lifted_len = lifted.len();
        lifted.push('\0');
        lifted.extend(literals.iter().map(|l| match l {
            Literal::Int4(_) => 'i',
            Literal::Text(_) => 'u',
        }));
        let text = cx.session.settings.text_context();
        let cached = self
            .plans
            .borrow()
            .get_simple(&lifted, true, &text.time_zone);
        let prepared = match cached {
            Some(prepared) => {
                self.plans.borrow_mut().count(true);
                prepared
            }
            None => {
                let statements = parse_sql(&lifted[..lifted_len]).ok()?;
                let [stmt] = statements.as_slice() else {
                    return None;
                };
                let declared = literals
                    .iter()
                    .map(|l| Type {
                        scalar: match l {
                            Literal::Int4(_) => Scalar::Int4,
                            Literal::Text(_) => Scalar::Unknown,
                        },
                        array: false,
                    })
                    .collect();
                let prepared = self
                    .prepare(Some(stmt), declared, &lifted[..lifted_len], text, true)
                    .ok()?;
                if !matches!(prepared.plan, Plan::Table(_))
                    || prepared.param_types.len() != literals.len()
                {
                    return None;
                }
                let prepared = Rc::new(prepared);
                let mut plans = self.plans.borrow_mut();
                plans.count(false);
                plans.put_simple(&lifted, true, prepared.clone(), &text.time_zone);
                prepared
            }
        };
        let mut params = Params::new();
        for (literal, &ty) in literals.iter().zip(&prepared.param_types) {
            // An unknown literal becomes a value of the type its context gave it through that
            // type's input function, as PostgreSQL coerces it.
            let value = match literal {
                Literal::Int4(v) if ty.scalar == Scalar::Int4 && !ty.array => Ok(Value::Int4(*v)),
                Literal::Int4(v) => text::decode(ty, v.to_string().as_bytes(), text),
                Literal::Text(s) => text::decode(ty, s.as_bytes(), text),
            };
            match value {
                Ok(v) => params.push(v),
                Err(e) => return Some(Err(e)),
            }
        }
        drop(literals);
        Some(self.run_simple(cx, &prepared, &params).await)
    }
}

impl Engine for Frontend {
    type Session = Session;
    type Statement = Prepared;
    type Portal = Portal;
    type Message = Message;

    fn timeouts(&self, session: &Session) -> shards::limits::Timeouts {
        session.settings.timeouts()
    }

    fn on_message(&self, msg: Message) {
        match msg {
            Message::StatsRequest { from, id } => {
                let stats = self.local_stats();
                self.dispatcher.send(
                    from,
                    Message::StatsReply {
                        id,
                        stats: Box::new(stats),
                    },
                );
            }
            Message::StatsReply { id, stats } => self.dispatcher.stats_arrived(id, *stats),
            Message::Notify(batch) => self.listeners.deliver(&batch),
            msg => self.dispatcher.on_message(msg),
        }
    }

    fn close_session(&self, session: &mut Session) {
        self.listeners.close(&mut session.notify);
        // A client gone mid-transaction: its writes are rolled back and its locks released.
        if let Some(block) = session.block.take() {
            self.release_snapshot(block.hold);
            if block.wrote {
                let dispatcher = self.dispatcher.clone();
                glommio::spawn_local(async move {
                    let _ = dispatcher.call(Request::Abort { tx: block.tx }).await;
                })
                .detach();
            }
        }
    }

    fn open_session(&self, start: &SessionStart<'_>) -> Result<Session, PgError> {
        let mut settings = Settings::new(start.user);
        for (name, value) in start.params.iter() {
            match name {
                "user" | "database" | "replication" => {}
                "options" => {
                    for (k, v) in parse_options(value)? {
                        settings.apply_startup(&k, &v)?;
                    }
                }
                name if name.starts_with("_pq_.") => {}
                name => settings.apply_startup(name, value)?,
            }
        }
        let peek_session = Arc::new(SessionSnapshot {
            text: settings.text_context().clone(),
            user: start.user.to_string(),
            database: start.database.to_string(),
            process_id: start.process_id,
        });
        Ok(Session {
            settings,
            reports: Vec::new(),
            user: start.user.to_string(),
            database: start.database.to_string(),
            process_id: start.process_id,
            stamps: Stamps::default(),
            transaction_started_us: None,
            peek_session,
            block: None,
            pending_copy: None,
            in_simple_query: false,
            implicit: false,
            notify: SessionNotify::default(),
        })
    }

    fn write_startup_parameters(&self, session: &Session, out: &mut Vec<u8>) {
        for (name, value) in session.settings.reported() {
            backend::write_parameter_status(out, name, value);
        }
    }

    async fn simple_query(&self, cx: &mut Cx<'_, Self>, sql: &str) -> Result<(), PgError> {
        // One Query message is one statement start for every statement its text holds.
        cx.session.stamps.statement_us = pg_us(cx.clock.start_us());
        cx.session.in_simple_query = true;
        let result = self.simple_query_inner(cx, sql).await;
        cx.session.in_simple_query = false;
        // The Query's implicit transaction, or the extended protocol's one it joined (a Query
        // ends that too, as in PostgreSQL).
        let ended = self.end_implicit(cx, result.is_err()).await;
        result.and(ended)
    }

    async fn sync(&self, cx: &mut Cx<'_, Self>) -> Result<(), PgError> {
        let failed = *cx.tx == TransactionStatus::Failed;
        self.end_implicit(cx, failed).await
    }

    async fn copy_in_done(
        &self,
        cx: &mut Cx<'_, Self>,
        data: Result<Vec<u8>, PgError>,
    ) -> Result<(), PgError> {
        let plan = cx.session.pending_copy.take();
        let data = data?;
        let Some(plan) = plan else {
            return Err(PgError::new(
                SqlState::INTERNAL_ERROR,
                "COPY data without a COPY statement",
            ));
        };
        let TablePlan::CopyFrom {
            table,
            columns,
            format,
        } = &*plan
        else {
            return Err(PgError::new(
                SqlState::INTERNAL_ERROR,
                "COPY data for a non-COPY statement",
            ));
        };
        // The COPY statement's start times (taken when its Query ran) stand for its rows.
        let session = &mut *cx.session;
        let ctx = session.settings.text_context();
        let rows = if format.csv {
            exec::parse_copy_csv(&data, table, columns, format.header, ctx)?
        } else {
            exec::parse_copy_text(&data, table, columns, ctx)?
        };
        let (tx, autocommit) = match &mut session.block {
            Some(b) => {
                b.wrote = true;
                (b.tx, false)
            }
            None => (self.new_tx(), true),
        };
        let request = Request::Write {
            tx,
            plan: plan.clone(),
            params: Params::new(),
            copy_rows: rows,
            session: session.peek_session(),
            stamps: session.stamps,
            formats: Formats::new(),
            autocommit,
        };
        let answer = self
            .dispatcher
            .call_cancellable(request, tx, cx.cancel)
            .await?;
        write_count_tag(cx.out, "COPY", answer.count);
        Ok(())
    }

    fn parse(
        &self,
        cx: &mut Cx<'_, Self>,
        sql: &str,
        param_oids: Oids<'_>,
    ) -> Result<Rc<Prepared>, PgError> {
        self.refresh_catalog();
        let text = cx.session.settings.text_context();
        let cached = self
            .plans
            .borrow_mut()
            .get_extended(sql, param_oids, &text.time_zone);
        let prepared = match cached {
            Some(p) => p,
            None => {
                let statements = parse_sql(sql)?;
                if statements.len() > 1 {
                    return Err(PgError::new(
                        SqlState::SYNTAX_ERROR,
                        "cannot insert multiple commands into a prepared statement",
                    ));
                }
                let mut param_types = Vec::with_capacity(param_oids.len());
                for oid in param_oids.iter() {
                    let ty = if oid == 0 {
                        Type {
                            scalar: Scalar::Unknown,
                            array: false,
                        }
                    } else {
                        Type::from_oid(oid).ok_or_else(|| {
                            PgError::new(
                                SqlState::FEATURE_NOT_SUPPORTED,
                                format!(
                                    "parameter type with OID {oid} is not supported by ringwire"
                                ),
                            )
                        })?
                    };
                    param_types.push(ty);
                }
                let prepared =
                    Rc::new(self.prepare(statements.first(), param_types, sql, text, false)?);
                self.plans.borrow_mut().put_extended(
                    sql,
                    param_oids,
                    prepared.clone(),
                    &text.time_zone,
                );
                prepared
            }
        };
        if *cx.tx == TransactionStatus::Failed && !is_transaction_exit(&prepared.plan) {
            return Err(aborted());
        }
        Ok(prepared)
    }

    fn describe_statement(&self, statement: &Prepared, arena: &Bump, out: &mut Vec<u8>) {
        let oids = bumpalo::collections::Vec::from_iter_in(
            statement.param_types.iter().map(|t| t.oid()),
            arena,
        );
        backend::write_parameter_description(out, &oids);
        if statement.columns.is_empty() {
            backend::write_no_data(out);
        } else {
            write_row_description(&statement.columns, &[], arena, out);
        }
    }

    fn bind(
        &self,
        cx: &mut Cx<'_, Self>,
        statement: &Rc<Prepared>,
        bind: &Bind<'_>,
    ) -> Result<Portal, PgError> {
        if bind.param_count() != statement.param_types.len() {
            return Err(PgError::new(
                SqlState::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                    bind.param_count(),
                    bind.statement,
                    statement.param_types.len()
                ),
            ));
        }
        if *cx.tx == TransactionStatus::Failed && !is_transaction_exit(&statement.plan) {
            return Err(aborted());
        }
        statement.fold()?;
        let ctx = cx.session.settings.text_context();
        let mut params = Params::with_capacity(bind.param_count());
        for (i, raw) in bind.params().enumerate() {
            let ty = statement.param_types[i];
            let value = match raw {
                None => Value::Null,
                Some(bytes) => match bind.param_format(i) {
                    Format::Text => text::decode(ty, bytes, ctx)?,
                    Format::Binary => binary::decode(ty, bytes).map_err(|_| {
                        PgError::new(
                            SqlState::INVALID_BINARY_REPRESENTATION,
                            format!("incorrect binary data format in bind parameter {}", i + 1),
                        )
                    })?,
                },
            };
            params.push(value);
        }
        let columns = statement.columns.len();
        let n = bind.result_format_count();
        if n > 1 && n != columns {
            return Err(PgError::new(
                SqlState::PROTOCOL_VIOLATION,
                format!("bind message has {n} result formats but query has {columns} columns"),
            ));
        }
        let formats: Formats = (0..columns).map(|i| bind.result_format(i)).collect();
        Ok(Portal {
            statement: statement.clone(),
            params,
            formats,
            rows: None,
            next_byte: 0,
            scan: None,
            done: false,
        })
    }

    fn describe_portal(&self, portal: &Portal, arena: &Bump, out: &mut Vec<u8>) {
        if portal.statement.columns.is_empty() {
            backend::write_no_data(out);
        } else {
            write_row_description(&portal.statement.columns, &portal.formats, arena, out);
        }
    }

    async fn execute(
        &self,
        cx: &mut Cx<'_, Self>,
        portal: &mut Portal,
        max_rows: u32,
    ) -> Result<Execution, PgError> {
        if portal.done {
            // A finished portal runs again as an empty result, as PostgreSQL's does.
            if !portal.statement.columns.is_empty() {
                write_select_tag(cx.out, &portal.statement.plan, 0);
            }
            return Ok(Execution::Complete);
        }
        if changes_catalog(&portal.statement) {
            // (DDL runs on its own: `changes_catalog`.)
            self.end_implicit(cx, false).await?;
        }
        if *cx.tx == TransactionStatus::Idle && !cx.sync_follows && writes(&portal.statement) {
            // A write with more of its batch to come before the Sync: as in PostgreSQL, what
            // runs up to the Sync is one transaction (an error undoes it, a client gone before
            // the Sync never commits it; JDBC's executeBatch and pgx's batches rely on it).
            // Followed by its Sync, it commits in one step as before.
            *cx.tx = TransactionStatus::InBlock;
            cx.session.implicit = true;
        }
        let statement = portal.statement.clone();
        if portal.scan.is_some() {
            return self.execute_scan(cx, portal, max_rows).await;
        }
        if portal.rows.is_none() {
            if max_rows == 0 || statement.columns.is_empty() {
                // All rows in one go: encode them straight into the write buffer.
                let sink = RowSink::Write {
                    formats: &portal.formats,
                };
                let rows = self.run(cx, &statement, &portal.params, sink).await?;
                portal.done = true;
                if let Some(n) = rows {
                    write_select_tag(cx.out, &statement.plan, n);
                }
                return Ok(Execution::Complete);
            }
            if self.portal_streams(cx, &statement) {
                return self.execute_scan(cx, portal, max_rows).await;
            }
            let mut buf = Vec::new();
            let sink = RowSink::Encoded {
                buf: &mut buf,
                formats: &portal.formats,
            };
            self.run(cx, &statement, &portal.params, sink).await?;
            portal.rows = Some(buf);
        }
        let rows = portal.rows.as_deref().expect("rows computed above");
        // Hand out up to max_rows DataRow frames (each is 'D', length, body).
        let mut sent = 0u64;
        let start = portal.next_byte;
        while portal.next_byte < rows.len() && (max_rows == 0 || sent < max_rows as u64) {
            let at = portal.next_byte;
            let len = u32::from_be_bytes([rows[at + 1], rows[at + 2], rows[at + 3], rows[at + 4]])
                as usize;
            portal.next_byte = at + 1 + len;
            sent += 1;
        }
        cx.out.extend_from_slice(&rows[start..portal.next_byte]);
        // Like PostgreSQL, suspend whenever the row limit is reached, without looking ahead: a
        // portal whose last row was just sent completes on the next Execute with "SELECT 0".
        if max_rows != 0 && sent == max_rows as u64 {
            return Ok(Execution::Suspended);
        }
        portal.done = true;
        write_select_tag(cx.out, &statement.plan, sent);
        Ok(Execution::Complete)
    }

    async fn idle(&self, session: &mut Session, out: &mut Vec<u8>) -> Result<(), PgError> {
        match session.notify.inbox() {
            Some(inbox) => inbox.wait(out).await,
            None => std::future::pending().await,
        }
    }

    fn end_of_cycle(
        &self,
        session: &mut Session,
        tx: TransactionStatus,
        error_in_cycle: bool,
        out: &mut Vec<u8>,
    ) {
        if tx == TransactionStatus::Idle {
            if let Some(block) = session.block.take() {
                // Every way out of a block goes through COMMIT/ROLLBACK or the session's end;
                // this only keeps a snapshot from being held forever if one did not.
                log::error!("a transaction block outlived its transaction");
                self.release_snapshot(block.hold);
            }
            session
                .settings
                .end_transaction(!error_in_cycle, &mut session.reports);
            self.end_notify(session, !error_in_cycle);
            session.transaction_started_us = None;
            // Before ReadyForQuery, as PostgreSQL does: a client sees what reached it during
            // the transaction it just finished (its own notifications too) before it may go on.
            if let Some(inbox) = session.notify.inbox() {
                inbox.drain(out);
            }
        }
        for (name, value) in session.reports.drain(..) {
            backend::write_parameter_status(out, name, &value);
        }
    }
}

/// The `options` startup parameter: `-c name=value` and `--name=value`, space separated,
/// backslash escaping a space, as PostgreSQL's `pg_split_opts` reads it (upstream mode reads
/// it with this too).
pub(crate) fn parse_options(options: &str) -> Result<Vec<(String, String)>, PgError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        let assignment = if w == "-c" {
            it.next()
        } else {
            w.strip_prefix("--")
                .or_else(|| w.strip_prefix("-c"))
                .map(str::to_string)
        };
        let Some((k, v)) = assignment.as_deref().and_then(|a| a.split_once('=')) else {
            return Err(PgError::fatal(
                SqlState::PROTOCOL_VIOLATION,
                format!("invalid command-line argument for server process: {w}"),
            )
            .with_hint("Try \"ringwire --help\" for more information."));
        };
        out.push((k.replace('-', "_"), v.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::operator_depth;

    #[test]
    fn operator_depth_bounds_chains_and_not_lists() {
        let chain = |n: usize, op: &str| vec!["1"; n + 1].join(op);
        assert_eq!(operator_depth(&format!("select {}", chain(100, "+"))), 101);
        // A word extends a chain as an operator does.
        let is_null = format!("select true{}", " is null".repeat(100));
        assert!(
            operator_depth(&is_null) >= 200,
            "{}",
            operator_depth(&is_null)
        );
        // List items do not deepen one another.
        let rows: Vec<String> = (0..1000).map(|i| format!("(-{i}, 'x'::text)")).collect();
        let insert = format!("insert into t values {}", rows.join(", "));
        assert!(operator_depth(&insert) < 10, "{}", operator_depth(&insert));
        // A group counts as its deepest item, and a chain of groups adds up.
        let nested = format!(
            "select coalesce({}, 0) + {}",
            chain(100, "+"),
            chain(100, "+")
        );
        assert!(
            operator_depth(&nested) >= 201,
            "{}",
            operator_depth(&nested)
        );
        let sum = format!("select ({}) + ({})", chain(100, "+"), chain(100, "+"));
        assert!(operator_depth(&sum) >= 101, "{}", operator_depth(&sum));
    }
}
