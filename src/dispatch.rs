//! The compute shard and the batching dispatcher that reaches it.
//!
//! **Where compute runs.** The compute worker — every table, the table locks, and the commit
//! sequencer — is a part of shard [`COMPUTE_SHARD`]'s engine, running as tasks on that shard's
//! executor (no extra threads: on a 2-core machine another thread would fight the shards and
//! the clients for the same cores). A statement from a connection on the compute shard calls
//! it directly: no message at all. From any other shard, requests queue in that shard's
//! [`Dispatcher`] outbox; the first request of an executor turn schedules a flush task, which
//! runs after every connection task that was ready in the same turn, so all of them travel as
//! one mesh message. The compute shard answers a batch with one message back (writes that must
//! wait for a lock answer on their own when they get it).
//!
//! **Timestamps.** Reads outside a transaction block read at their shard's frontier
//! (`oracle::Frontiers::read`, one local load). The compute shard commits a transaction by
//! giving it the next timestamp, stamping its intents, and publishing the timestamp to every
//! shard's frontier *before* it replies — so any read that starts after the client sees the
//! commit reads at or after it (strict serializability, see the oracle crate).
//!
//! **Writers** take table-level locks held to the end of their transaction (strict two-phase
//! locking; a lock cycle is a deadlock, 40P01). Inside a transaction block, reads see the
//! block's snapshot plus its own writes.
//!
//! **Compaction.** A block's snapshot is held in `oracle::Holds` (a padded slot per shard,
//! written when a block opens or closes). The compute compacts every [`COMPACT_EVERY_COMMITS`]
//! commits and every [`COMPACT_INTERVAL`], below the oldest held snapshot (or its latest commit
//! if none is held). A statement outside a block read at its shard's frontier, which
//! compaction may have passed while the peek travelled: the compute then reads it at the
//! compaction horizon instead — a later state, but one that was current while the statement
//! ran, so the read stays strict serializable.
//!
//! **No allocation per peek in steady state.** On the compute shard a peek is a function call
//! that encodes rows straight into the connection's buffer. From other shards, parameters and
//! formats travel inline ([`Params`], [`Formats`]), the reply rows come back in a buffer the
//! shard lent with the request, the message vectors go back and forth for reuse, waiting
//! requests sit in a reused slab, and one long-lived task per shard sends the batches.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use oracle::{Frontiers, Holds};
use protocol::backend::DataRowWriter;
use protocol::types::{binary, text, TextContext, Type, Value};
use protocol::{Format, PgError, Severity, SqlState};
use shards::engine::CancelToken;
use shards::runtime::Mesh;
use smallvec::SmallVec;

use crate::compute::exec::{self, ScanCursor};
use crate::compute::storage::{Table, View};
use crate::compute::{IndexDef, TableDef, TableId, TableRef, Timestamp, TxId};
use crate::replica::{Fallback, Replica, ReplicaBatch, ReplicaEvent, TableWrites};
use crate::sql::expr::{SessionInfo, Stamps};
use crate::sql::plan::{self, TablePlan};
use crate::stats::{self, Counters, Hist, ShardStats};

/// The shard whose engine holds the compute worker and the sequencer.
pub const COMPUTE_SHARD: usize = 0;

/// Compact after this many commits: bounds the versions a write-heavy load leaves behind
/// between two timer ticks, while one compaction (which visits only rows written since the
/// last) stays a small fraction of the commits' own work.
pub const COMPACT_EVERY_COMMITS: u64 = 256;

/// The compute times one peek in this many, and records it as this many alike: timing every
/// peek took two clock reads each, 0.4% of the server's samples at 64 connections (PERF.md,
/// session 18), for a histogram whose shape a sample keeps. The peeks timed are picked at
/// random (not every 8th: a client repeating a cycle of 2, 4 or 8 statements would have one
/// of them timed every time), so the count estimates the number of peeks.
const PEEK_SAMPLE: u32 = 8;
/// And at least this often when something may be compactable: old versions go soon after the
/// last snapshot that needed them closes, even when writes have stopped.
pub const COMPACT_INTERVAL: Duration = Duration::from_millis(50);

/// A statement's parameters as they travel to the compute: inline up to four (a point select
/// has one), so sending them allocates nothing.
pub type Params = SmallVec<[Value; 4]>;
/// Result formats, inline for up to eight columns.
pub type Formats = SmallVec<[Format; 8]>;

/// State shared by every shard, created before they start.
pub struct Shared {
    pub frontiers: Arc<Frontiers>,
    /// The oldest snapshot each shard's transaction blocks hold (see [`oracle::Holds`]).
    pub holds: Holds,
    /// The catalog as of the latest DDL. Shards copy it when `catalog_version` moves (a load
    /// per query) and plan against their copy; only DDL takes the write lock.
    catalog: RwLock<Catalog>,
    catalog_version: AtomicU64,
    /// `--read-replicas`: shards other than the compute's keep a replica of every table and
    /// serve reads from it when it is fresh enough (`crate::replica`).
    pub read_replicas: bool,
    /// Testing only (`--replica-ship-delay-us`, hidden): hold every shipment to the replicas
    /// this long, so tests see replicas lag and can check that stale replicas are not read.
    pub replica_ship_delay: Duration,
}

impl Shared {
    /// With read replicas (the default).
    pub fn new(shards: usize) -> Arc<Shared> {
        Self::with_read_replicas(shards, true, Duration::ZERO)
    }

    /// `read_replicas` and `replica_ship_delay` as the fields say (replicas need 2 shards).
    pub fn with_read_replicas(
        shards: usize,
        read_replicas: bool,
        replica_ship_delay: Duration,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            frontiers: Arc::new(Frontiers::new(shards)),
            holds: Holds::new(shards),
            catalog: RwLock::new(Catalog::default()),
            catalog_version: AtomicU64::new(0),
            read_replicas: read_replicas && shards > 1,
            replica_ship_delay,
        })
    }

    pub fn catalog_version(&self) -> u64 {
        self.catalog_version.load(Ordering::Acquire)
    }

    pub fn catalog_snapshot(&self) -> Catalog {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Tables and index names (one relation namespace, as in PostgreSQL).
#[derive(Clone, Default)]
pub struct Catalog {
    tables: BTreeMap<String, TableRef>,
    /// index name → table name
    indexes: BTreeMap<String, String>,
    next_id: TableId,
}

impl plan::Catalog for Catalog {
    fn table(&self, name: &str) -> Option<TableRef> {
        match name.strip_prefix("ringwire.") {
            Some(relation) => stats::relation(relation),
            None => self.tables.get(name).cloned(),
        }
    }
    fn relation_exists(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.indexes.contains_key(name)
    }
}

/// What the compute needs of the session that sent a statement. A session keeps one behind an
/// `Arc` and replaces it only when its text settings change, so sending it costs a reference
/// count, not a copy.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSnapshot {
    pub text: TextContext,
    pub user: String,
    pub database: String,
    pub process_id: i32,
}

/// A [`SessionSnapshot`] with the statement's start times: what expressions evaluated by the
/// compute see of their session.
pub struct StatementSession<'a> {
    pub session: &'a SessionSnapshot,
    pub stamps: Stamps,
}

impl SessionInfo for StatementSession<'_> {
    fn current_setting(&self, _name: &str) -> Option<String> {
        // Settings are not shipped with a peek; `current_setting()` in a table query is
        // answered as unknown (a known gap, see the compute issue's notes).
        None
    }
    fn text_context(&self) -> &TextContext {
        &self.session.text
    }
    fn database(&self) -> &str {
        &self.session.database
    }
    fn user(&self) -> &str {
        &self.session.user
    }
    fn backend_pid(&self) -> i32 {
        self.session.process_id
    }
    fn stamps(&self) -> Stamps {
        self.stamps
    }
}

/// At which timestamp a peek reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAt {
    /// A statement outside a transaction block, at the frontier its shard loaded when it
    /// started (strict serializable). If compaction passed that timestamp while the peek
    /// travelled, the compute reads at the compaction horizon: a state that was current while
    /// the statement ran, so still strict serializable.
    Frontier(Timestamp),
    /// A transaction block's snapshot, held in [`Shared::holds`]: exactly this timestamp.
    Snapshot(Timestamp),
    /// `serializable` isolation: the compute's latest complete timestamp, without the oracle.
    /// Its [`Answer::ts`] tells a block which snapshot it got.
    Latest,
}

/// What a peek reads: committed data at `at`, plus the intents of `tx` (a block's own writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadSpec {
    pub at: ReadAt,
    pub tx: Option<TxId>,
}

pub enum Request {
    /// Run a SELECT (or COPY TO's select) at `read`. `rows` is a buffer the sender lends for
    /// the encoded reply (it comes back in [`Answer::rows`]).
    Peek {
        plan: Arc<TablePlan>,
        params: Params,
        read: ReadSpec,
        session: Arc<SessionSnapshot>,
        stamps: Stamps,
        formats: Formats,
        rows: Vec<u8>,
        /// A result produced in chunks: where this chunk resumes (see [`exec::select_chunk`]);
        /// it comes back advanced in [`Answer::cursor`]. None: the whole result.
        cursor: Option<ScanCursor>,
    },
    /// Run an INSERT/UPDATE/DELETE/TRUNCATE/COPY FROM as part of `tx`; with `autocommit`,
    /// commit it at once.
    Write {
        tx: TxId,
        plan: Arc<TablePlan>,
        params: Params,
        copy_rows: Vec<Vec<Value>>,
        session: Arc<SessionSnapshot>,
        stamps: Stamps,
        formats: Formats,
        autocommit: bool,
    },
    Commit {
        tx: TxId,
    },
    Abort {
        tx: TxId,
    },
    /// CREATE/DROP TABLE/INDEX. `tx` owns the table locks while the DDL waits and runs: the
    /// session's open block, or a fresh id; either way the statement's cancel can name it.
    Ddl {
        tx: TxId,
        plan: Arc<TablePlan>,
    },
    /// Add an index (or the primary key) to a table that may hold rows (`tx` as for `Ddl`).
    AddIndex {
        tx: TxId,
        table: String,
        index: IndexDef,
        primary: bool,
    },
}

/// What [`Compute::handle_now`] did with a request.
// A transient return value, never stored or sent in bulk: boxing the request would cost an
// allocation per write for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Handled {
    Now(Reply),
    /// It may wait for a lock: run it with [`Compute::handle`] in a task.
    MustWait(Request),
}

/// The answer to a request: encoded DataRows (in the formats asked for) and a row count.
#[derive(Default)]
pub struct Answer {
    pub rows: Vec<u8>,
    pub count: u64,
    pub notices: Vec<PgError>,
    /// For a peek: the timestamp it read at.
    pub ts: Timestamp,
    /// For a peek of one chunk: the cursor after it.
    pub cursor: Option<ScanCursor>,
}

pub type Reply = Result<Answer, PgError>;

/// How often a cancelled statement waiting on another shard's compute repeats its
/// [`Message::CancelWait`] (see [`Dispatcher::call_cancellable`]).
const CANCEL_RESEND: Duration = Duration::from_millis(5);

/// A batch of requests or of replies; emptied vectors travel back for reuse.
pub type RequestBatch = Vec<(u64, Request)>;
pub type ReplyBatch = Vec<(u64, Reply)>;

pub enum Message {
    /// Requests for the compute. `spare` is an emptied reply vector for the compute to reuse.
    Requests {
        from: usize,
        batch: RequestBatch,
        spare: ReplyBatch,
    },
    /// Replies from the compute. `spare` is the emptied request vector they answer.
    Replies {
        replies: ReplyBatch,
        spare: RequestBatch,
    },
    /// The statement of transaction `tx` was cancelled: end its lock wait, if any
    /// ([`Compute::cancel_wait`]).
    CancelWait { tx: TxId },
    /// Send this shard's counters to shard `from` (for `ringwire.shard_stats`).
    StatsRequest { from: usize, id: u64 },
    StatsReply {
        id: u64,
        /// Boxed: it carries histograms, and every mesh message is as large as the largest
        /// variant.
        stats: Box<ShardStats>,
    },
    /// Commits and DDL for this shard's read replica, in compute order (one `Arc`'d batch
    /// shared by every shard).
    Replicate(ReplicaBatch),
    /// A committed transaction's NOTIFYs, for this shard's listening sessions (the engine's;
    /// see `notify`).
    Notify(Arc<crate::notify::Batch>),
}

/// Encode one row of `columns` as a DataRow in `formats` (missing formats are text).
pub fn write_data_row(
    row: &[Value],
    columns: &[(String, Type)],
    formats: &[Format],
    ctx: &TextContext,
    out: &mut Vec<u8>,
) {
    let mut w = DataRowWriter::begin(out);
    for (i, value) in row.iter().enumerate() {
        if value.is_null() {
            w.null();
            continue;
        }
        let ty = columns[i].1;
        match formats.get(i).copied().unwrap_or(Format::Text) {
            Format::Text => w.value_with(|o| text::encode(value, ty, ctx, o)),
            Format::Binary => w.value_with(|o| binary::encode(value, ty, o)),
        }
    }
    w.finish();
}

/// A result produced in chunks ([`exec::select_chunk`]) pauses once a chunk has encoded this
/// many bytes: what one statement adds to its connection's memory while its client is slow,
/// beyond the socket path's own bounded output buffer.
pub const CHUNK_BYTES: usize = 256 << 10;

/// Run a SELECT or COPY TO plan over `table` at `view`, appending DataRows (or CopyData) to
/// `out`. Returns the row count (of this chunk, with `chunk`).
///
/// With `chunk` (only for plans that [`exec::streams`]) it produces one chunk of about
/// [`CHUNK_BYTES`], resuming where the cursor stands, and leaves the cursor at the next row
/// (`done` at the end). Without, the whole result.
#[allow(clippy::too_many_arguments)]
pub fn run_select(
    table: &Table,
    plan: &TablePlan,
    params: &[Value],
    view: View,
    session: &dyn SessionInfo,
    formats: &[Format],
    out: &mut Vec<u8>,
    chunk: Option<&mut ScanCursor>,
) -> Result<u64, PgError> {
    let (TablePlan::Select(select) | TablePlan::CopyTo { source: select, .. }) = plan else {
        return Err(PgError::new(
            SqlState::INTERNAL_ERROR,
            "peek of a non-SELECT plan",
        ));
    };
    let ctx = session.text_context();
    let start = out.len();
    let TablePlan::CopyTo { format, .. } = plan else {
        // The hot path: rows are encoded straight into `out`, nothing staged.
        return match chunk {
            None => exec::select(table, select, params, view, session, &mut |row| {
                write_data_row(row, &select.columns, formats, ctx, out);
                Ok(())
            }),
            Some(cursor) => {
                exec::select_chunk(table, select, params, view, session, cursor, &mut |row| {
                    write_data_row(row, &select.columns, formats, ctx, out);
                    Ok(chunk_flow(out, start))
                })
            }
        };
    };
    let types: Vec<Type> = select.columns.iter().map(|c| c.1).collect();
    if format.header && chunk.as_ref().is_none_or(|c| c.is_fresh()) {
        let names: Vec<Value> = select
            .columns
            .iter()
            .map(|c| Value::Text(c.0.clone()))
            .collect();
        let text_types = vec![
            Type {
                scalar: protocol::types::Scalar::Text,
                array: false
            };
            names.len()
        ];
        let start = protocol::wire::begin_message(out, b'd');
        if format.csv {
            exec::format_copy_csv(&names, &text_types, ctx, out);
        } else {
            exec::format_copy_text(&names, &text_types, ctx, out);
        }
        protocol::wire::finish_message(out, start);
    }
    // COPY TO: one CopyData per row.
    let copy_row = |row: &[Value], out: &mut Vec<u8>| {
        let at = protocol::wire::begin_message(out, b'd');
        if format.csv {
            exec::format_copy_csv(row, &types, ctx, out);
        } else {
            exec::format_copy_text(row, &types, ctx, out);
        }
        protocol::wire::finish_message(out, at);
    };
    match chunk {
        None => exec::select(table, select, params, view, session, &mut |row| {
            copy_row(row, out);
            Ok(())
        }),
        Some(cursor) => {
            exec::select_chunk(table, select, params, view, session, cursor, &mut |row| {
                copy_row(row, out);
                Ok(chunk_flow(out, start))
            })
        }
    }
}

/// Pause a chunk once it has encoded [`CHUNK_BYTES`] since `start`.
fn chunk_flow(out: &[u8], start: usize) -> ControlFlow<()> {
    if out.len() - start >= CHUNK_BYTES {
        ControlFlow::Break(())
    } else {
        ControlFlow::Continue(())
    }
}

/// A table holding `rows`, all committed: what a query over a `ringwire.*` relation runs on.
pub fn virtual_table(def: TableRef, rows: Vec<Vec<Value>>) -> Table {
    const TX: TxId = 1;
    let mut table = Table::new(def);
    let ctx = TextContext::default();
    for row in rows {
        table
            .insert(TX, row, &ctx)
            .expect("a stats row fits its relation (no constraints)");
    }
    table.commit(TX, 0);
    table
}

/// Wakes every waiter when table locks are released.
#[derive(Default)]
pub(crate) struct Notify {
    epoch: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Notify {
    pub(crate) fn notify_all(&self) {
        self.epoch.set(self.epoch.get() + 1);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    pub(crate) fn wait(&self) -> NotifyWait<'_> {
        NotifyWait {
            notify: self,
            epoch: self.epoch.get(),
        }
    }
}

pub(crate) struct NotifyWait<'a> {
    notify: &'a Notify,
    epoch: u64,
}

impl Future for NotifyWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.epoch.get() != self.epoch {
            return Poll::Ready(());
        }
        self.notify.wakers.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}

/// The compute worker and sequencer (on [`COMPUTE_SHARD`] only).
pub struct Compute {
    shared: Arc<Shared>,
    tables: RefCell<HashMap<TableId, Table>>,
    /// table → the transaction holding its write lock
    locks: RefCell<HashMap<TableId, TxId>>,
    /// transaction → the table it is waiting to lock (for deadlock detection)
    waiting_for: RefCell<HashMap<TxId, TableId>>,
    /// Waiting transactions whose statement was cancelled (CancelRequest or
    /// statement_timeout): their lock wait ends with 57014 at its next wake-up.
    cancelled_waits: RefCell<Vec<TxId>>,
    /// transaction → tables it holds locks on (and may have intents in)
    tx_tables: RefCell<HashMap<TxId, Vec<TableId>>>,
    released: Notify,
    last_commit: Cell<Timestamp>,
    /// Every table has been compacted below this: no version a read at or after it needs
    /// is gone, and a [`ReadAt::Frontier`] read below it is moved up to it.
    compacted_below: Cell<Timestamp>,
    commits_since_compaction: Cell<u64>,
    /// Time to run a peek, in µs (with metrics on), one peek in [`PEEK_SAMPLE`] timed.
    pub peek_us: Hist,
    metrics_on: bool,
    /// A xorshift32 state that picks the peeks timed.
    peek_pick: Cell<u32>,
    /// Table definitions as of the last catalog change the compute announced: DDL that
    /// changes them bumps the catalog version and ships the changed tables to the replicas.
    announced: RefCell<HashMap<TableId, TableRef>>,
    /// Commits and DDL not yet shipped to the replicas (None: replicas off).
    replication: Option<Replication>,
}

/// The compute's outbox to the read replicas.
#[derive(Default)]
struct Replication {
    pending: RefCell<Vec<ReplicaEvent>>,
    /// The shipper task, parked until an event is queued.
    shipper: Cell<Option<Waker>>,
}

impl Replication {
    fn push(&self, event: ReplicaEvent) {
        self.pending.borrow_mut().push(event);
        if let Some(shipper) = self.shipper.take() {
            shipper.wake();
        }
    }
}

fn deadlock() -> PgError {
    PgError::new(SqlState(*b"40P01"), "deadlock detected")
        .with_detail("Two transactions wait for table locks the other holds.")
        .with_hint("See server log for query details.")
}

impl Compute {
    pub fn new(shared: Arc<Shared>) -> Compute {
        Compute {
            tables: RefCell::new(HashMap::new()),
            locks: RefCell::new(HashMap::new()),
            waiting_for: RefCell::new(HashMap::new()),
            cancelled_waits: RefCell::new(Vec::new()),
            tx_tables: RefCell::new(HashMap::new()),
            released: Notify::default(),
            last_commit: Cell::new(0),
            compacted_below: Cell::new(0),
            commits_since_compaction: Cell::new(0),
            peek_us: Hist::default(),
            metrics_on: metrics_on(),
            peek_pick: Cell::new(0x9e37_79b9),
            announced: RefCell::new(HashMap::new()),
            replication: shared.read_replicas.then(Replication::default),
            shared,
        }
    }

    /// Events for the replicas queued since the last call (None if none or replicas off).
    fn take_replica_events(&self) -> Option<Vec<ReplicaEvent>> {
        let replication = self.replication.as_ref()?;
        let mut pending = replication.pending.borrow_mut();
        (!pending.is_empty()).then(|| std::mem::take(&mut *pending))
    }

    /// After DDL (whether it succeeded or not: a multi-table DROP can fail half-way): if the
    /// tables' definitions changed, bump the catalog version every shard checks and ship a
    /// committed copy of each changed table to the replicas, after every earlier commit.
    fn announce_schema(&self) {
        let tables = self.tables.borrow();
        let mut announced = self.announced.borrow_mut();
        let changed: Vec<TableId> = tables
            .iter()
            .filter(|(id, t)| {
                !announced
                    .get(id)
                    .is_some_and(|d| Arc::ptr_eq(d, t.def_ref()))
            })
            .map(|(id, _)| *id)
            .collect();
        let dropped = announced.keys().any(|id| !tables.contains_key(id));
        if changed.is_empty() && !dropped {
            return;
        }
        announced.retain(|id, _| tables.contains_key(id));
        for id in &changed {
            announced.insert(*id, tables[id].def_ref().clone());
        }
        let catalog_version = self.shared.catalog_version.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(replication) = &self.replication {
            replication.push(ReplicaEvent::Schema {
                catalog_version,
                tables: tables.keys().copied().collect(),
                copies: changed
                    .iter()
                    .map(|id| tables[id].committed_copy())
                    .collect(),
                compacted_below: self.compacted_below.get(),
            });
        }
    }

    /// Compact on a timer as well as every [`COMPACT_EVERY_COMMITS`] commits, so versions go
    /// once the snapshot that kept them ends even if nothing is written afterwards. The task
    /// holds only a weak reference: it ends with the compute.
    pub fn start_compaction_timer(self: &Rc<Self>) {
        let me = Rc::downgrade(self);
        glommio::spawn_local(async move {
            loop {
                shards::time::sleep(COMPACT_INTERVAL).await;
                let Some(compute) = me.upgrade() else { return };
                compute.compact();
            }
        })
        .detach();
    }

    /// Drop the versions no read can need any more: those hidden below the oldest snapshot a
    /// block holds on any shard (or below the latest commit if none is held). Cheap when there
    /// is nothing to do: the tables visit only rows written since they were last compacted, and
    /// nothing is visited unless the horizon moved.
    pub fn compact(&self) {
        let candidate = self.last_commit.get();
        if candidate <= self.compacted_below.get() {
            return;
        }
        let horizon = self.shared.holds.horizon(candidate);
        if horizon <= self.compacted_below.get() {
            return;
        }
        for table in self.tables.borrow_mut().values_mut() {
            table.compact(horizon);
        }
        self.compacted_below.set(horizon);
        self.commits_since_compaction.set(0);
    }

    /// The timestamp a read at `at` is served at.
    fn read_ts(&self, at: ReadAt) -> Timestamp {
        match at {
            ReadAt::Frontier(ts) => ts.max(self.compacted_below.get()),
            ReadAt::Snapshot(ts) => {
                debug_assert!(
                    ts >= self.compacted_below.get(),
                    "a held snapshot at {ts} was compacted below {}",
                    self.compacted_below.get()
                );
                ts
            }
            ReadAt::Latest => self.last_commit.get(),
        }
    }

    /// Answer a request that needs no waiting (reads, commits, aborts) now; give back one that
    /// may wait (for a lock) and must run as a task.
    pub fn handle_now(&self, request: Request) -> Handled {
        match request {
            Request::Peek {
                plan,
                params,
                read,
                session,
                stamps,
                formats,
                mut rows,
                mut cursor,
            } => {
                let session = StatementSession {
                    session: &session,
                    stamps,
                };
                Handled::Now(
                    self.peek_into(
                        &plan,
                        &params,
                        read,
                        &session,
                        &formats,
                        &mut rows,
                        cursor.as_mut(),
                    )
                    .map(|(count, ts)| Answer {
                        rows,
                        count,
                        notices: Vec::new(),
                        ts,
                        cursor,
                    }),
                )
            }
            Request::Commit { tx } => {
                self.commit(tx);
                Handled::Now(Ok(Answer::default()))
            }
            Request::Abort { tx } => {
                self.abort(tx);
                Handled::Now(Ok(Answer::default()))
            }
            other => Handled::MustWait(other),
        }
    }

    pub async fn handle(&self, request: Request) -> Reply {
        let request = match self.handle_now(request) {
            Handled::Now(reply) => return reply,
            Handled::MustWait(request) => request,
        };
        match request {
            Request::Peek { .. } | Request::Commit { .. } | Request::Abort { .. } => {
                unreachable!("answered by handle_now")
            }
            Request::Write {
                tx,
                plan,
                params,
                copy_rows,
                session,
                stamps,
                formats,
                autocommit,
            } => {
                let session = StatementSession {
                    session: &session,
                    stamps,
                };
                let result = self
                    .write(tx, &plan, &params, copy_rows, &session, &formats)
                    .await;
                if autocommit {
                    match &result {
                        Ok(_) => {
                            self.commit(tx);
                        }
                        Err(_) => self.abort(tx),
                    }
                }
                result
            }
            Request::Ddl { tx, plan } => {
                let reply = self.ddl(&plan, tx).await;
                self.announce_schema();
                reply
            }
            Request::AddIndex {
                tx,
                table,
                index,
                primary,
            } => {
                let added = self.add_index(&table, index, primary, tx).await;
                self.announce_schema();
                added.map(|()| Answer::default())
            }
        }
    }

    /// Run a SELECT (or COPY TO) plan at `read`, appending its encoded rows to `out`. Returns
    /// the row count and the timestamp read at. On error `out` is as it was. With `chunk`,
    /// one chunk of the result (see [`run_select`]).
    #[allow(clippy::too_many_arguments)]
    pub fn peek_into(
        &self,
        plan: &TablePlan,
        params: &[Value],
        read: ReadSpec,
        session: &dyn SessionInfo,
        formats: &[Format],
        out: &mut Vec<u8>,
        chunk: Option<&mut ScanCursor>,
    ) -> Result<(u64, Timestamp), PgError> {
        let mut x = self.peek_pick.get();
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.peek_pick.set(x);
        let timed = self.metrics_on && x < u32::MAX / PEEK_SAMPLE;
        let started = timed.then(std::time::Instant::now);
        let result = self.run_peek(plan, params, read, session, formats, out, chunk);
        if let Some(started) = started {
            self.peek_us
                .record_n(started.elapsed().as_micros() as u64, PEEK_SAMPLE.into());
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn run_peek(
        &self,
        plan: &TablePlan,
        params: &[Value],
        read: ReadSpec,
        session: &dyn SessionInfo,
        formats: &[Format],
        out: &mut Vec<u8>,
        chunk: Option<&mut ScanCursor>,
    ) -> Result<(u64, Timestamp), PgError> {
        let (TablePlan::Select(select) | TablePlan::CopyTo { source: select, .. }) = plan else {
            return Err(PgError::new(
                SqlState::INTERNAL_ERROR,
                "peek of a non-SELECT plan",
            ));
        };
        let ts = self.read_ts(read.at);
        let view = View { ts, tx: read.tx };
        let mark = out.len();
        let result = if select.table == stats::TABLE_STATS_ID {
            let table = self.table_stats();
            run_select(
                &table,
                plan,
                params,
                View::LATEST,
                session,
                formats,
                out,
                None,
            )
        } else {
            let tables = self.tables.borrow();
            let table = tables.get(&select.table).ok_or_else(dropped_table)?;
            run_select(table, plan, params, view, session, formats, out, chunk)
        };
        match result {
            Ok(count) => Ok((count, ts)),
            Err(e) => {
                out.truncate(mark);
                Err(e)
            }
        }
    }

    /// `ringwire.table_stats`, built from the tables as they are now.
    fn table_stats(&self) -> Table {
        let tables = self.tables.borrow();
        let mut named: Vec<&Table> = tables.values().collect();
        named.sort_by(|a, b| a.def().name.cmp(&b.def().name));
        let rows = named
            .into_iter()
            .map(|t| {
                stats::table_row(
                    &t.def().name,
                    t.len_at(View::LATEST),
                    t.version_count(),
                    t.index_entry_count(),
                )
            })
            .collect();
        let def = stats::relation("table_stats").expect("a ringwire relation");
        virtual_table(def, rows)
    }

    /// Take `table`'s write lock for `tx`, waiting while another transaction holds it.
    async fn lock(&self, table: TableId, tx: TxId) -> Result<(), PgError> {
        loop {
            let owner = self.locks.borrow().get(&table).copied();
            match owner {
                None => {
                    self.locks.borrow_mut().insert(table, tx);
                    self.tx_tables
                        .borrow_mut()
                        .entry(tx)
                        .or_default()
                        .push(table);
                    return Ok(());
                }
                Some(o) if o == tx => return Ok(()),
                Some(owner) => {
                    if self.waits_for(owner, tx) {
                        return Err(deadlock());
                    }
                    self.waiting_for.borrow_mut().insert(tx, table);
                    self.released.wait().await;
                    self.waiting_for.borrow_mut().remove(&tx);
                    let mut cancelled = self.cancelled_waits.borrow_mut();
                    if let Some(i) = cancelled.iter().position(|&t| t == tx) {
                        cancelled.swap_remove(i);
                        // The requester words it (user request or statement timeout).
                        return Err(shards::engine::query_canceled());
                    }
                }
            }
        }
    }

    /// Take `table`'s write lock for a DDL statement run by `tx`, waiting for its writers (a
    /// wait the statement's cancel or timeout ends, as for writes). DDL is not transactional
    /// in ringwire: it applies at once, so it cannot change a table its own open block has
    /// written (PostgreSQL would; here the block's writes would outlive their table). That is
    /// refused rather than waited for, which would wait for itself forever.
    async fn lock_for_ddl(
        &self,
        table: TableId,
        tx: TxId,
        what: &str,
        name: &str,
    ) -> Result<(), PgError> {
        if self.locks.borrow().get(&table) == Some(&tx) {
            return Err(PgError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!("{what} on table \"{name}\", which this transaction has written, is not supported by ringwire"),
            )
            .with_hint("ringwire runs DDL outside transactions: COMMIT or ROLLBACK first."));
        }
        self.lock(table, tx).await
    }

    /// Release the lock [`Self::lock_for_ddl`] took. Only that table's: `tx` may be an open
    /// block whose locks on other tables stay until it ends.
    fn unlock_after_ddl(&self, table: TableId, tx: TxId) {
        let mut tx_tables = self.tx_tables.borrow_mut();
        if let Some(tables) = tx_tables.get_mut(&tx) {
            tables.retain(|&t| t != table);
            if tables.is_empty() {
                tx_tables.remove(&tx);
            }
        }
        drop(tx_tables);
        self.locks.borrow_mut().remove(&table);
        self.released.notify_all();
    }

    /// End `tx`'s lock wait, if it is waiting, with 57014: its statement was cancelled. A
    /// transaction that is not waiting is untouched (its statement is running or done; a
    /// cancel never reaches a later statement).
    pub fn cancel_wait(&self, tx: TxId) {
        if self.waiting_for.borrow().contains_key(&tx) {
            self.cancelled_waits.borrow_mut().push(tx);
            self.released.notify_all();
        }
    }

    /// Whether `from` (transitively, through the locks it waits for) waits for `tx`: then `tx`
    /// waiting for `from` would close a cycle.
    fn waits_for(&self, mut from: TxId, tx: TxId) -> bool {
        let locks = self.locks.borrow();
        let waiting = self.waiting_for.borrow();
        for _ in 0..=locks.len() {
            match waiting.get(&from).and_then(|t| locks.get(t)) {
                Some(&next) if next == tx => return true,
                Some(&next) => from = next,
                None => return false,
            }
        }
        false
    }

    async fn write(
        &self,
        tx: TxId,
        plan: &TablePlan,
        params: &[Value],
        copy_rows: Vec<Vec<Value>>,
        session: &dyn SessionInfo,
        formats: &[Format],
    ) -> Reply {
        let table_ids: Vec<TableId> = match plan {
            TablePlan::Insert(p) => vec![p.table],
            TablePlan::Update(p) => vec![p.table],
            TablePlan::Delete(p) => vec![p.table],
            TablePlan::CopyFrom { table, .. } => vec![table.id],
            TablePlan::Truncate { tables } => {
                let catalog = self
                    .shared
                    .catalog
                    .read()
                    .unwrap_or_else(|e| e.into_inner());
                let mut ids = Vec::new();
                for name in tables {
                    ids.push(
                        catalog
                            .tables
                            .get(name)
                            .ok_or_else(|| no_such_table(name))?
                            .id,
                    );
                }
                ids
            }
            _ => {
                return Err(PgError::new(
                    SqlState::INTERNAL_ERROR,
                    "write of a non-write plan",
                ))
            }
        };
        for id in &table_ids {
            self.lock(*id, tx).await?;
        }
        let mut tables = self.tables.borrow_mut();
        let mut answer = Answer::default();
        let ctx = session.text_context();
        let returning: &[(String, Type)] = match plan {
            TablePlan::Insert(p) => &p.returning_columns,
            TablePlan::Update(p) => &p.returning_columns,
            TablePlan::Delete(p) => &p.returning_columns,
            _ => &[],
        };
        let mut sink: Vec<Vec<Value>> = Vec::new();
        let mut out = |row: &[Value]| {
            sink.push(row.to_vec());
            Ok(())
        };
        let outcome = match plan {
            TablePlan::Insert(p) => {
                let t = tables.get_mut(&p.table).ok_or_else(dropped_table)?;
                exec::insert(t, p, params, tx, session, &mut out)?
            }
            TablePlan::Update(p) => {
                let t = tables.get_mut(&p.table).ok_or_else(dropped_table)?;
                exec::update(t, p, params, tx, session, &mut out)?
            }
            TablePlan::Delete(p) => {
                let t = tables.get_mut(&p.table).ok_or_else(dropped_table)?;
                exec::delete(t, p, params, tx, session, &mut out)?
            }
            TablePlan::CopyFrom { table, .. } => {
                let t = tables.get_mut(&table.id).ok_or_else(dropped_table)?;
                exec::insert_rows(t, copy_rows, tx, ctx)?
            }
            TablePlan::Truncate { .. } => {
                for id in &table_ids {
                    let t = tables.get_mut(id).ok_or_else(dropped_table)?;
                    t.truncate(tx)?;
                }
                exec::WriteOutcome { rows_affected: 0 }
            }
            _ => unreachable!("checked above"),
        };
        for row in &sink {
            write_data_row(row, returning, formats, ctx, &mut answer.rows);
        }
        answer.count = outcome.rows_affected;
        Ok(answer)
    }

    /// Commit `tx`: one timestamp for all its tables, published to every shard before the
    /// caller replies. Returns the timestamp (the previous one if `tx` wrote nothing).
    pub fn commit(&self, tx: TxId) -> Timestamp {
        let held = self.tx_tables.borrow_mut().remove(&tx).unwrap_or_default();
        if held.is_empty() {
            return self.last_commit.get();
        }
        let ts = self.last_commit.get() + 1;
        let mut tables = self.tables.borrow_mut();
        let mut locks = self.locks.borrow_mut();
        let mut writes = Vec::new();
        for id in &held {
            if let Some(t) = tables.get_mut(id) {
                match &self.replication {
                    None => t.commit(tx, ts),
                    Some(_) => {
                        let mut rows = Vec::new();
                        t.commit_with(tx, ts, |rid, data| rows.push((rid, data.map(Box::from))));
                        if !rows.is_empty() {
                            writes.push(TableWrites { table: *id, rows });
                        }
                    }
                }
            }
            locks.remove(id);
        }
        self.last_commit.set(ts);
        self.shared.frontiers.publish(ts);
        // Queued after the publish and shipped later: the commit never waits for a replica
        // (a replica that has not applied `ts` is stale for reads at `ts` and falls back).
        if let Some(replication) = &self.replication {
            replication.push(ReplicaEvent::Commit { ts, writes });
        }
        drop((tables, locks));
        self.released.notify_all();
        let commits = self.commits_since_compaction.get() + 1;
        self.commits_since_compaction.set(commits);
        if commits >= COMPACT_EVERY_COMMITS {
            self.commits_since_compaction.set(0);
            self.compact();
        }
        ts
    }

    pub fn abort(&self, tx: TxId) {
        self.cancelled_waits.borrow_mut().retain(|&t| t != tx);
        let held = self.tx_tables.borrow_mut().remove(&tx).unwrap_or_default();
        let mut tables = self.tables.borrow_mut();
        let mut locks = self.locks.borrow_mut();
        for id in &held {
            if let Some(t) = tables.get_mut(id) {
                t.abort(tx);
            }
            locks.remove(id);
        }
        drop((tables, locks));
        if !held.is_empty() {
            self.released.notify_all();
        }
    }

    /// DDL runs on the compute shard, takes the write lock of the tables it changes (so it
    /// waits for open writers), and bumps the catalog version every shard checks.
    async fn ddl(&self, plan: &TablePlan, tx: TxId) -> Reply {
        let mut answer = Answer::default();
        match plan {
            TablePlan::CreateTable { def, if_not_exists } => {
                let mut catalog = self
                    .shared
                    .catalog
                    .write()
                    .unwrap_or_else(|e| e.into_inner());
                if catalog.tables.contains_key(&def.name) || catalog.indexes.contains_key(&def.name)
                {
                    if *if_not_exists {
                        answer.notices.push(notice(format!(
                            "relation \"{}\" already exists, skipping",
                            def.name
                        )));
                        return Ok(answer);
                    }
                    return Err(PgError::new(
                        SqlState(*b"42P07"),
                        format!("relation \"{}\" already exists", def.name),
                    ));
                }
                catalog.next_id += 1;
                let def: TableRef = Arc::new(TableDef {
                    id: catalog.next_id,
                    ..def.clone()
                });
                for index in def.primary_key.iter().chain(def.indexes.iter()) {
                    if catalog.relation_exists_name(&index.name) {
                        return Err(PgError::new(
                            SqlState(*b"42P07"),
                            format!("relation \"{}\" already exists", index.name),
                        ));
                    }
                }
                for index in def.primary_key.iter().chain(def.indexes.iter()) {
                    catalog.indexes.insert(index.name.clone(), def.name.clone());
                }
                catalog.tables.insert(def.name.clone(), def.clone());
                self.tables.borrow_mut().insert(def.id, Table::new(def));
            }
            TablePlan::DropTable { names, if_exists } => {
                for name in names {
                    let id = self
                        .shared
                        .catalog
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .tables
                        .get(name)
                        .map(|t| t.id);
                    let Some(id) = id else {
                        if *if_exists {
                            answer
                                .notices
                                .push(notice(format!("table \"{name}\" does not exist, skipping")));
                            continue;
                        }
                        return Err(no_such_table(name));
                    };
                    // Wait for writers, then drop.
                    self.lock_for_ddl(id, tx, "DROP TABLE", name).await?;
                    let mut catalog = self
                        .shared
                        .catalog
                        .write()
                        .unwrap_or_else(|e| e.into_inner());
                    catalog.tables.remove(name);
                    catalog.indexes.retain(|_, t| t != name);
                    self.tables.borrow_mut().remove(&id);
                    drop(catalog);
                    self.unlock_after_ddl(id, tx);
                }
            }
            TablePlan::DropIndex { names, if_exists } => {
                for name in names {
                    let table = self
                        .shared
                        .catalog
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .indexes
                        .get(name)
                        .cloned();
                    match table {
                        Some(table) => self.drop_index(&table, name, tx).await?,
                        None if *if_exists => answer
                            .notices
                            .push(notice(format!("index \"{name}\" does not exist, skipping"))),
                        None => {
                            return Err(PgError::new(
                                SqlState::UNDEFINED_OBJECT,
                                format!("index \"{name}\" does not exist"),
                            ))
                        }
                    }
                }
            }
            TablePlan::CreateIndex {
                table,
                index,
                if_not_exists,
            } => {
                let exists = self
                    .shared
                    .catalog
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .relation_exists_name(&index.name);
                if exists && *if_not_exists {
                    answer.notices.push(notice(format!(
                        "relation \"{}\" already exists, skipping",
                        index.name
                    )));
                    return Ok(answer);
                }
                self.add_index(table, index.clone(), false, tx).await?;
            }
            _ => {
                return Err(PgError::new(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "this DDL is not supported by ringwire yet",
                ))
            }
        }
        // The catalog version moves in `announce_schema`, when the tables did change.
        Ok(answer)
    }
}

impl Compute {
    /// Rebuild `table` with one more index (or its primary key) under the table's write lock:
    /// the rows of the latest state are re-inserted into a new table, where the new index's
    /// uniqueness (and, for a primary key, NOT NULL) is checked; on any error the old table
    /// stays. The rebuilt rows are stamped with timestamp 0, so every snapshot sees them
    /// (PostgreSQL blocks readers for this DDL; ringwire lets older snapshots read the rebuilt
    /// table instead).
    async fn add_index(
        &self,
        table: &str,
        index: IndexDef,
        primary: bool,
        tx: TxId,
    ) -> Result<(), PgError> {
        let def = {
            let catalog = self
                .shared
                .catalog
                .read()
                .unwrap_or_else(|e| e.into_inner());
            if catalog.relation_exists_name(&index.name) {
                return Err(PgError::new(
                    SqlState(*b"42P07"),
                    format!("relation \"{}\" already exists", index.name),
                ));
            }
            catalog
                .tables
                .get(table)
                .cloned()
                .ok_or_else(|| no_such_table(table))?
        };
        let what = if primary {
            "ALTER TABLE"
        } else {
            "CREATE INDEX"
        };
        self.lock_for_ddl(def.id, tx, what, table).await?;
        let result = self.rebuild_with_index(&def, index, primary);
        // Release the DDL's lock whatever happened.
        self.unlock_after_ddl(def.id, tx);
        result
    }

    fn rebuild_with_index(
        &self,
        def: &TableRef,
        index: IndexDef,
        primary: bool,
    ) -> Result<(), PgError> {
        let mut new_def = (**def).clone();
        if primary {
            if new_def.primary_key.is_some() {
                return Err(PgError::new(
                    SqlState(*b"42P16"),
                    format!(
                        "multiple primary keys for table \"{}\" are not allowed",
                        def.name
                    ),
                ));
            }
            for &c in &index.columns {
                new_def.columns[c].not_null = true;
            }
            new_def.primary_key = Some(index.clone());
        } else {
            new_def.indexes.push(index.clone());
        }
        self.replace_table(def, Arc::new(new_def))?;
        let mut catalog = self
            .shared
            .catalog
            .write()
            .unwrap_or_else(|e| e.into_inner());
        catalog.indexes.insert(index.name.clone(), def.name.clone());
        Ok(())
    }

    /// Swap `def`'s table for one built to `new_def` holding the same latest rows (checked
    /// against `new_def`'s constraints), stamped with timestamp 0. Caller holds the table's
    /// write lock.
    fn replace_table(&self, def: &TableRef, new_def: TableRef) -> Result<(), PgError> {
        let mut rebuilt = Table::new(new_def.clone());
        let rebuild_tx = u64::MAX / 2 + def.id as u64;
        {
            let tables = self.tables.borrow();
            let old = tables.get(&def.id).ok_or_else(dropped_table)?;
            let ctx = TextContext::default();
            for (_, row) in old.scan(View::LATEST) {
                rebuilt.insert(rebuild_tx, row.to_vec(), &ctx)?;
            }
        }
        rebuilt.commit(rebuild_tx, 0);
        self.tables.borrow_mut().insert(def.id, rebuilt);
        let mut catalog = self
            .shared
            .catalog
            .write()
            .unwrap_or_else(|e| e.into_inner());
        catalog.tables.insert(def.name.clone(), new_def);
        Ok(())
    }

    /// `DROP INDEX name` on `table`: the table is rebuilt without it. The primary key's index
    /// cannot be dropped (PostgreSQL: 2BP01).
    async fn drop_index(&self, table: &str, name: &str, tx: TxId) -> Result<(), PgError> {
        let def = {
            let catalog = self
                .shared
                .catalog
                .read()
                .unwrap_or_else(|e| e.into_inner());
            catalog
                .tables
                .get(table)
                .cloned()
                .ok_or_else(|| no_such_table(table))?
        };
        if def.primary_key.as_ref().is_some_and(|pk| pk.name == name) {
            return Err(PgError::new(
                SqlState(*b"2BP01"),
                format!("cannot drop index {name} because constraint {name} on table {table} requires it"),
            )
            .with_hint(format!("You can drop constraint {name} on table {table} instead.")));
        }
        self.lock_for_ddl(def.id, tx, "DROP INDEX", table).await?;
        let mut new_def = (*def).clone();
        new_def.indexes.retain(|i| i.name != name);
        let result = self.replace_table(&def, Arc::new(new_def));
        if result.is_ok() {
            let mut catalog = self
                .shared
                .catalog
                .write()
                .unwrap_or_else(|e| e.into_inner());
            catalog.indexes.remove(name);
        }
        self.unlock_after_ddl(def.id, tx);
        result
    }
}

impl Catalog {
    fn relation_exists_name(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.indexes.contains_key(name)
    }
}

fn notice(message: String) -> PgError {
    PgError {
        severity: Severity::Notice,
        ..PgError::new(SqlState(*b"42P07"), message)
    }
}

fn no_such_table(name: &str) -> PgError {
    PgError::new(
        SqlState::UNDEFINED_TABLE,
        format!("table \"{name}\" does not exist"),
    )
}

fn dropped_table() -> PgError {
    PgError::new(
        SqlState::UNDEFINED_TABLE,
        "the table was dropped while the statement was planned",
    )
}

/// Where a request waits for its reply, in the dispatcher's slab (slot `i` answers request id
/// `i`). Slots are reused, so a waiting request costs no allocation.
#[derive(Default)]
struct Slot {
    reply: Option<Reply>,
    waker: Option<Waker>,
    state: SlotState,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum SlotState {
    #[default]
    Free,
    Waiting,
    /// Its caller is gone (the connection closed mid-request): the reply is dropped on
    /// arrival and only then is the slot free, so a late reply never reaches a newer request.
    Abandoned,
}

/// The future of one remote request.
struct ReplyWait<'d> {
    dispatcher: &'d Dispatcher,
    id: usize,
    done: bool,
}

impl Future for ReplyWait<'_> {
    type Output = Reply;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        let mut slots = self.dispatcher.slots.borrow_mut();
        let slot = &mut slots[self.id];
        debug_assert!(
            slot.state == SlotState::Waiting,
            "polled a slot not waiting"
        );
        match slot.reply.take() {
            Some(reply) => {
                slot.state = SlotState::Free;
                slot.waker = None;
                drop(slots);
                self.dispatcher.free_slots.borrow_mut().push(self.id);
                self.done = true;
                Poll::Ready(reply)
            }
            None => {
                if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    slot.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for ReplyWait<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut slots = self.dispatcher.slots.borrow_mut();
            let slot = &mut slots[self.id];
            slot.waker = None;
            if slot.reply.take().is_some() {
                // The reply came but was never collected: the slot is free already.
                slot.state = SlotState::Free;
                self.dispatcher.free_slots.borrow_mut().push(self.id);
            } else {
                slot.state = SlotState::Abandoned;
            }
        }
    }
}

/// Batches a read waits for its replica to catch up before going to the compute instead.
const REPLICA_WAITS_MAX: u32 = 8;

/// Spare buffers kept for reuse per kind; more are dropped (they come back one per message).
const SPARES_MAX: usize = 16;
/// A reply buffer that grew past this for one large result is not kept.
const SPARE_ROWS_BYTES_MAX: usize = 256 << 10;

/// What [`Dispatcher::gather_stats`] got: the shards that answered, in shard order, and those
/// that did not answer in time.
pub struct Gathered {
    pub stats: Vec<ShardStats>,
    pub missing: Vec<usize>,
}

/// How long a stats gather waits for every shard before answering without the late ones.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether this shard records metrics (`--metrics`); true off a shard (unit tests).
fn metrics_on() -> bool {
    shards::metrics::current().is_none_or(|m| m.enabled)
}

/// A `ringwire.shard_stats` query gathering every shard's counters.
struct StatsGather {
    got: Vec<Option<ShardStats>>,
    waker: Option<Waker>,
}

/// A shard's way to the compute: direct on the compute shard, batched messages elsewhere.
pub struct Dispatcher {
    pub shard_id: usize,
    mesh: Mesh<Message>,
    pub compute: Option<Rc<Compute>>,
    /// This shard's read replica of the compute's tables (other shards, `--read-replicas on`).
    pub replica: Option<Rc<Replica>>,
    /// This shard's counters (the engine's and the dispatcher's).
    pub counters: Counters,
    outbox: RefCell<RequestBatch>,
    flush_scheduled: Cell<bool>,
    /// The flush task, parked until a request is queued.
    flusher: Cell<Option<Waker>>,
    slots: RefCell<Vec<Slot>>,
    free_slots: RefCell<Vec<usize>>,
    /// Emptied vectors and buffers back from the compute, for the next requests.
    spare_batches: RefCell<Vec<RequestBatch>>,
    spare_replies: RefCell<Vec<ReplyBatch>>,
    spare_rows: RefCell<Vec<Vec<u8>>>,
    next_stats_id: Cell<u64>,
    stats: RefCell<HashMap<u64, StatsGather>>,
}

impl Dispatcher {
    /// Runs on the shard's thread inside its executor: it starts the shard's flush task (or,
    /// on the compute shard, the compaction timer).
    pub fn new(mesh: Mesh<Message>, shared: Arc<Shared>) -> Rc<Dispatcher> {
        let shard_id = mesh.shard_id;
        let replica = (shard_id != COMPUTE_SHARD && shared.read_replicas)
            .then(|| Rc::new(Replica::new(shard_id, shared.clone())));
        let compute = (shard_id == COMPUTE_SHARD).then(|| Rc::new(Compute::new(shared)));
        let dispatcher = Rc::new(Dispatcher {
            shard_id,
            mesh,
            compute,
            replica,
            counters: Counters {
                metrics_on: metrics_on(),
                ..Counters::default()
            },
            outbox: RefCell::new(Vec::new()),
            flush_scheduled: Cell::new(false),
            flusher: Cell::new(None),
            slots: RefCell::new(Vec::new()),
            free_slots: RefCell::new(Vec::new()),
            spare_batches: RefCell::new(Vec::new()),
            spare_replies: RefCell::new(Vec::new()),
            spare_rows: RefCell::new(Vec::new()),
            next_stats_id: Cell::new(0),
            stats: RefCell::new(HashMap::new()),
        });
        match &dispatcher.compute {
            Some(compute) => {
                compute.start_compaction_timer();
                if compute.replication.is_some() {
                    Self::start_shipper(&dispatcher);
                }
            }
            None => Self::start_flusher(&dispatcher),
        }
        if let Some(replica) = &dispatcher.replica {
            start_replica_compaction_timer(replica);
        }
        dispatcher
    }

    /// The compute shard's task that ships commits and DDL to the replicas: parked until the
    /// first event of an executor turn wakes it, so it runs after every task already ready in
    /// that turn and their commits share one message per shard.
    fn start_shipper(me: &Rc<Self>) {
        let delay = me
            .compute
            .as_ref()
            .map_or(Duration::ZERO, |c| c.shared.replica_ship_delay);
        let me = Rc::downgrade(me);
        glommio::spawn_local(async move {
            while let Some(dispatcher) = ShipWanted(&me).await {
                if !delay.is_zero() {
                    drop(dispatcher);
                    shards::time::sleep(delay).await;
                    let Some(again) = me.upgrade() else { return };
                    again.ship_replicas();
                    continue;
                }
                dispatcher.ship_replicas();
            }
        })
        .detach();
    }

    /// Send every queued replica event to every other shard (one message each, sharing one
    /// batch). Called by the shipper task, and before any reply leaves the compute, so a
    /// shard applies a commit before it sees the reply to the write.
    fn ship_replicas(&self) {
        let Some(events) = self.compute.as_ref().and_then(|c| c.take_replica_events()) else {
            return;
        };
        let batch: ReplicaBatch = Arc::new(events);
        for shard in (0..self.mesh.shards()).filter(|&s| s != self.shard_id) {
            self.send(shard, Message::Replicate(batch.clone()));
        }
    }

    /// Send replies from the compute to shard `to`, after any replica events they may depend on.
    fn reply(&self, to: usize, msg: Message) {
        let delayed = self
            .compute
            .as_ref()
            .is_some_and(|c| !c.shared.replica_ship_delay.is_zero());
        if !delayed {
            self.ship_replicas();
        }
        self.send(to, msg);
    }

    /// Run a read against this shard's replica once it provably may serve it (see
    /// `crate::replica`). A replica that is only *behind* — the commits or DDL the read must
    /// see are already committed and on their way — is waited for: that costs at most the
    /// one crossing already under way, where going to the compute costs two plus the
    /// compute's time. None: no replica here, or the read must go to the compute (it needs
    /// its block's intents, reads `ringwire.table_stats`, or the replica compacted past it).
    ///
    /// # Cancel safety
    /// Dropping the future while it waits leaves nothing behind (`out` is untouched).
    #[allow(clippy::too_many_arguments)]
    pub async fn replica_peek(
        &self,
        plan: &TablePlan,
        params: &[Value],
        read: ReadSpec,
        session: &dyn SessionInfo,
        formats: &[Format],
        out: &mut Vec<u8>,
        mut chunk: Option<&mut ScanCursor>,
    ) -> Option<Result<(u64, Timestamp), PgError>> {
        let replica = self.replica.as_ref()?;
        // Loaded once: a serializable read retried after each batch must not chase a frontier
        // that commits keep moving.
        let latest_floor = match read.at {
            ReadAt::Latest => replica.frontier(),
            _ => 0,
        };
        let mut waits = 0;
        loop {
            let chunk = chunk.as_deref_mut();
            match replica.peek(
                plan,
                params,
                read,
                latest_floor,
                session,
                formats,
                out,
                chunk,
            ) {
                Ok(result) => {
                    Counters::bump(&self.counters.replica_hits);
                    return Some(result);
                }
                // Every wait but a stream of DDL ends at the first batch (the read's timestamp
                // is fixed); the bound keeps even that from holding a read indefinitely.
                Err(Fallback::Behind) if waits < REPLICA_WAITS_MAX => {
                    if waits == 0 {
                        Counters::bump(&self.counters.replica_stale);
                    }
                    waits += 1;
                    replica.applied_changed().await;
                }
                Err(Fallback::Behind) => {
                    Counters::bump(&self.counters.replica_fallbacks);
                    return None;
                }
                Err(Fallback::Compacted) => {
                    Counters::bump(&self.counters.replica_fallbacks);
                    return None;
                }
                Err(Fallback::NotReplicated) => return None,
            }
        }
    }

    /// The task that sends the outbox: parked until the first request of an executor turn
    /// wakes it, which queues it behind every task already ready in that turn, so their
    /// requests join the same batch. One long-lived task instead of one spawned per batch.
    fn start_flusher(me: &Rc<Self>) {
        let me = Rc::downgrade(me);
        glommio::spawn_local(async move {
            while let Some(dispatcher) = FlushWanted(&me).await {
                dispatcher.flush();
            }
        })
        .detach();
    }

    /// Send `request` to the compute and wait for its reply.
    pub async fn call(&self, request: Request) -> Reply {
        if let Some(compute) = &self.compute {
            Counters::bump(&self.counters.direct_requests);
            return compute.handle(request).await;
        }
        let started = self.counters.start();
        let id = self.take_slot();
        self.outbox.borrow_mut().push((id as u64, request));
        if !self.flush_scheduled.replace(true) {
            if let Some(flusher) = self.flusher.take() {
                flusher.wake();
            }
        }
        let reply = ReplyWait {
            dispatcher: self,
            id,
            done: false,
        }
        .await;
        self.counters.round_trip_us.record_since(started);
        reply
    }

    /// [`Dispatcher::call`] for a request of transaction `tx` that may wait for a lock: when
    /// `cancel` fires (CancelRequest or statement_timeout) the compute ends the wait, and the
    /// statement fails with the token's 57014 (its wording says which of the two). The
    /// request is never abandoned: the reply still says whether it ran.
    pub async fn call_cancellable(
        &self,
        request: Request,
        tx: TxId,
        cancel: &CancelToken,
    ) -> Reply {
        let mut call = std::pin::pin!(self.call(request));
        let mut cancelled = false;
        // From another shard the cancel may reach the compute before the request has started
        // to wait (still in flight, or its task not yet run), where it is ignored: send it
        // again until the reply comes. The compute ignores it for a transaction that is not
        // waiting, and this transaction's next statement cannot start before the reply.
        let mut resend: Option<Pin<Box<shards::time::Sleep>>> = None;
        let reply = std::future::poll_fn(|cx| {
            if let Poll::Ready(reply) = call.as_mut().poll(cx) {
                return Poll::Ready(reply);
            }
            if !cancelled {
                let mut fired = std::pin::pin!(cancel.cancelled());
                if fired.as_mut().poll(cx).is_ready() {
                    cancelled = true;
                    self.cancel_wait(tx);
                    if self.compute.is_none() {
                        resend = Some(Box::pin(shards::time::sleep(CANCEL_RESEND)));
                    }
                }
            }
            while let Some(timer) = resend.as_mut() {
                if timer.as_mut().poll(cx).is_pending() {
                    break;
                }
                self.cancel_wait(tx);
                *timer = Box::pin(shards::time::sleep(CANCEL_RESEND));
            }
            Poll::Pending
        })
        .await;
        match reply {
            Err(e) if cancelled && e.code == SqlState::QUERY_CANCELED => {
                Err(cancel.check().err().unwrap_or(e))
            }
            other => other,
        }
    }

    fn cancel_wait(&self, tx: TxId) {
        match &self.compute {
            Some(compute) => compute.cancel_wait(tx),
            None => self.send(COMPUTE_SHARD, Message::CancelWait { tx }),
        }
    }

    fn take_slot(&self) -> usize {
        let mut slots = self.slots.borrow_mut();
        let id = self.free_slots.borrow_mut().pop().unwrap_or_else(|| {
            slots.push(Slot::default());
            slots.len() - 1
        });
        debug_assert!(slots[id].state == SlotState::Free, "took a busy slot");
        slots[id].state = SlotState::Waiting;
        id
    }

    /// A buffer for a peek's reply rows: lent with the request, given back with
    /// [`Dispatcher::recycle_rows`] once copied out.
    pub fn rows_buffer(&self) -> Vec<u8> {
        self.spare_rows.borrow_mut().pop().unwrap_or_default()
    }

    pub fn recycle_rows(&self, mut rows: Vec<u8>) {
        let mut spare = self.spare_rows.borrow_mut();
        if rows.capacity() > 0
            && rows.capacity() <= SPARE_ROWS_BYTES_MAX
            && spare.len() < SPARES_MAX
        {
            rows.clear();
            spare.push(rows);
        }
    }

    fn flush(&self) {
        self.flush_scheduled.set(false);
        let next = self.spare_batches.borrow_mut().pop().unwrap_or_default();
        let batch = std::mem::replace(&mut *self.outbox.borrow_mut(), next);
        if batch.is_empty() {
            keep_spare(&self.spare_batches, batch);
            return;
        }
        self.counters.record_batch(batch.len());
        let spare = self.spare_replies.borrow_mut().pop().unwrap_or_default();
        if !self.mesh.send(
            COMPUTE_SHARD,
            Message::Requests {
                from: self.shard_id,
                batch,
                spare,
            },
        ) {
            log::error!("shard {}: the compute shard is gone", self.shard_id);
        }
    }

    /// How many shards there are.
    pub fn shards(&self) -> usize {
        self.mesh.shards()
    }

    /// Send a message to shard `to` over the mesh.
    pub fn send(&self, to: usize, msg: Message) {
        if !self.mesh.send(to, msg) {
            log::error!("shard {}: shard {to} is gone", self.shard_id);
        }
    }

    /// A mesh message arrived on this shard (stats messages are the engine's).
    pub fn on_message(self: &Rc<Self>, msg: Message) {
        match msg {
            Message::Replies { mut replies, spare } => {
                {
                    let mut slots = self.slots.borrow_mut();
                    for (id, reply) in replies.drain(..) {
                        let slot = &mut slots[id as usize];
                        match slot.state {
                            SlotState::Waiting => {
                                slot.reply = Some(reply);
                                if let Some(w) = slot.waker.take() {
                                    w.wake();
                                }
                            }
                            SlotState::Abandoned => {
                                slot.state = SlotState::Free;
                                self.free_slots.borrow_mut().push(id as usize);
                            }
                            SlotState::Free => {
                                log::error!("shard {}: a reply for no request", self.shard_id)
                            }
                        }
                    }
                }
                keep_spare(&self.spare_replies, replies);
                keep_spare(&self.spare_batches, spare);
            }
            Message::Requests {
                from,
                mut batch,
                spare,
            } => {
                let Some(compute) = self.compute.clone() else {
                    log::error!(
                        "shard {}: compute requests sent to a shard without compute",
                        self.shard_id
                    );
                    return;
                };
                // Reads (and commits) are answered at once, together in one message, in the
                // vector the sender gave back; writes may wait for locks, so each runs as a
                // task and answers when it is done.
                let mut replies = spare;
                for (id, request) in batch.drain(..) {
                    match compute.handle_now(request) {
                        Handled::Now(reply) => replies.push((id, reply)),
                        Handled::MustWait(request) => {
                            let (compute, me) = (compute.clone(), self.clone());
                            glommio::spawn_local(async move {
                                let reply = compute.handle(request).await;
                                me.reply(
                                    from,
                                    Message::Replies {
                                        replies: vec![(id, reply)],
                                        spare: Vec::new(),
                                    },
                                );
                            })
                            .detach();
                        }
                    }
                }
                if !replies.is_empty() || batch.capacity() > 0 {
                    self.reply(
                        from,
                        Message::Replies {
                            replies,
                            spare: batch,
                        },
                    );
                }
            }
            Message::CancelWait { tx } => match &self.compute {
                Some(compute) => compute.cancel_wait(tx),
                None => log::error!(
                    "shard {}: a cancel for the compute sent to a shard without compute",
                    self.shard_id
                ),
            },
            Message::Replicate(batch) => match &self.replica {
                Some(replica) => replica.apply(batch),
                None => log::error!(
                    "shard {}: replica events reached a shard without a replica",
                    self.shard_id
                ),
            },
            Message::StatsRequest { .. } | Message::StatsReply { .. } | Message::Notify(_) => {
                log::error!(
                    "shard {}: an engine's message reached the dispatcher",
                    self.shard_id
                )
            }
        }
    }

    /// Every shard's stats, this shard's being `local` (None: ask this shard over the mesh
    /// too, as a task that is not the engine does): one message to each shard and one back.
    /// Shards answer from their mesh drain, so this normally waits only for delivery; a shard
    /// that has not answered within `timeout` (busy in a task that does not yield) is listed
    /// in [`Gathered::missing`] instead of holding the caller forever.
    pub async fn gather_stats(&self, local: Option<ShardStats>, timeout: Duration) -> Gathered {
        let shards = self.mesh.shards();
        let id = self.next_stats_id.get();
        self.next_stats_id.set(id + 1);
        let mut got = vec![None; shards];
        let ask_self = local.is_none();
        got[self.shard_id] = local;
        self.stats
            .borrow_mut()
            .insert(id, StatsGather { got, waker: None });
        for shard in (0..shards).filter(|&s| s != self.shard_id || ask_self) {
            self.send(
                shard,
                Message::StatsRequest {
                    from: self.shard_id,
                    id,
                },
            );
        }
        struct Gather<'d> {
            dispatcher: &'d Dispatcher,
            id: u64,
            // `shards::time`: a glommio timer would fire late on the io_uring path.
            timer: shards::time::Sleep,
        }
        impl Future for Gather<'_> {
            type Output = Gathered;
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Gathered> {
                let timed_out = Pin::new(&mut self.timer).poll(cx).is_ready();
                let mut all = self.dispatcher.stats.borrow_mut();
                let gather = all.get_mut(&self.id).expect("registered above");
                if timed_out || gather.got.iter().all(Option::is_some) {
                    let gather = all.remove(&self.id).expect("present");
                    let missing = (0..gather.got.len())
                        .filter(|&s| gather.got[s].is_none())
                        .collect();
                    return Poll::Ready(Gathered {
                        stats: gather.got.into_iter().flatten().collect(),
                        missing,
                    });
                }
                gather.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
        impl Drop for Gather<'_> {
            fn drop(&mut self) {
                self.dispatcher.stats.borrow_mut().remove(&self.id);
            }
        }
        Gather {
            dispatcher: self,
            id,
            timer: shards::time::sleep(timeout),
        }
        .await
    }

    /// Shard `stats.shard`'s answer to [`Dispatcher::gather_stats`] request `id`.
    pub fn stats_arrived(&self, id: u64, stats: ShardStats) {
        let mut all = self.stats.borrow_mut();
        if let Some(gather) = all.get_mut(&id) {
            if let Some(place) = gather.got.get_mut(stats.shard) {
                *place = Some(stats);
            }
            if let Some(w) = gather.waker.take() {
                w.wake();
            }
        }
    }
}

/// Keep an emptied vector for reuse, unless enough are kept or it never allocated.
fn keep_spare<T>(pool: &RefCell<Vec<Vec<T>>>, spare: Vec<T>) {
    let mut pool = pool.borrow_mut();
    if spare.capacity() > 0 && pool.len() < SPARES_MAX {
        debug_assert!(spare.is_empty(), "a spare vector must come back empty");
        pool.push(spare);
    }
}

/// Compact a replica on a timer as well as every [`COMPACT_EVERY_COMMITS`] commits applied,
/// so versions go once this shard's last snapshot needing them ends. Holds only a weak
/// reference: it ends with the replica.
fn start_replica_compaction_timer(replica: &Rc<Replica>) {
    let me = Rc::downgrade(replica);
    glommio::spawn_local(async move {
        loop {
            shards::time::sleep(COMPACT_INTERVAL).await;
            let Some(replica) = me.upgrade() else { return };
            replica.compact();
        }
    })
    .detach();
}

/// Resolves when the compute has replica events to ship (None once the dispatcher is gone).
struct ShipWanted<'a>(&'a Weak<Dispatcher>);

impl Future for ShipWanted<'_> {
    type Output = Option<Rc<Dispatcher>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(dispatcher) = self.0.upgrade() else {
            return Poll::Ready(None);
        };
        let replication = dispatcher
            .compute
            .as_ref()
            .and_then(|c| c.replication.as_ref())
            .expect("the shipper runs only with a compute that replicates");
        if !replication.pending.borrow().is_empty() {
            return Poll::Ready(Some(dispatcher));
        }
        replication.shipper.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// Resolves when the dispatcher has requests to send (None once it is gone).
struct FlushWanted<'a>(&'a Weak<Dispatcher>);

impl Future for FlushWanted<'_> {
    type Output = Option<Rc<Dispatcher>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(dispatcher) = self.0.upgrade() else {
            return Poll::Ready(None);
        };
        if dispatcher.flush_scheduled.get() {
            return Poll::Ready(Some(dispatcher));
        }
        dispatcher.flusher.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}
