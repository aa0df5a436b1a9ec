//! Per-shard read replicas of the compute's tables (`--read-replicas on`, the default).
//!
//! **Why.** Every table lives in the compute on shard 0; a read on any other shard used to
//! cross cores to it and back — with one query in flight, two thread wake-ups per query
//! (docs/PERF.md). A replica lets such a shard answer reads itself, with the same plans and
//! the same executor, writing rows straight into the connection's buffer.
//!
//! **How it is fed.** After each commit the compute records the commit's effects — per table
//! written, each row's new committed version (row id and values, or a deletion) at the commit
//! timestamp — and after each DDL a [`ReplicaEvent::Schema`] with a committed copy of every
//! table whose definition changed (and the tables that exist). The compute never waits for a
//! replica: events queue on the compute and travel as one mesh message per flush
//! ([`ReplicaBatch`], shared by every shard through an `Arc`), sent when the compute's shipper
//! task runs (after the tasks ready in the same executor turn, so many commits share a
//! message) and, before any reply the compute sends to a shard, to that reply's channel
//! first — so a shard applies a commit before it sees the reply to the write (its writer
//! reads its own write locally). Each shard applies batches in order when its driver drains
//! the mesh.
//!
//! **When a read may use it (the freshness proof).** `applied` is the timestamp of the last
//! commit applied: everything committed at or below it is in the replica, nothing above it.
//! The compute stores a commit's timestamp into every shard's frontier slot before it replies
//! to the writer, so a read at `ts` = its shard's frontier that finds `applied >= ts` sees
//! every acknowledged write: strict serializable exactly as a read at the compute. A replica
//! serves a read at `ts` only when `compacted_below <= ts <= applied`, it reflects the current
//! catalog version (so it has exactly the compute's tables and indexes), and the read carries
//! no transaction intents. A replica that is only *behind* (the read's commits or DDL are
//! committed and queued for it: the compute queues them in the same step that publishes
//! their frontier or catalog version) is
//! waited for — at most the one crossing already under way, where the compute would cost two
//! and its own time; a read the replica compacted past, or one that needs intents, goes to the
//! compute, which is always correct.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use protocol::types::Value;
use protocol::{Format, PgError};

use crate::compute::exec::ScanCursor;
use crate::compute::storage::{RowId, Table, View};
use crate::compute::{TableId, Timestamp};
use crate::dispatch::{
    run_select, Notify, NotifyWait, ReadAt, ReadSpec, Shared, COMPACT_EVERY_COMMITS,
};
use crate::sql::expr::SessionInfo;
use crate::sql::plan::TablePlan;

/// Events the compute ships to every replica, in the order they happened on the compute.
pub enum ReplicaEvent {
    /// A commit at `ts` and the rows it changed (a commit that changed no row still advances
    /// `applied`).
    Commit {
        ts: Timestamp,
        writes: Vec<TableWrites>,
    },
    /// DDL changed the catalog to `catalog_version`: `tables` are every table that exists now,
    /// `copies` committed copies of those whose definition changed (new, or rebuilt with an
    /// index), taken at the compute's state after every earlier commit. The compute had
    /// compacted below `compacted_below` when it copied them.
    Schema {
        catalog_version: u64,
        tables: Vec<TableId>,
        copies: Vec<Table>,
        compacted_below: Timestamp,
    },
}

impl ReplicaEvent {
    /// A copy for one more replica (a batch is shared by every shard).
    fn clone_for_replica(&self) -> ReplicaEvent {
        match self {
            ReplicaEvent::Commit { ts, writes } => ReplicaEvent::Commit {
                ts: *ts,
                writes: writes
                    .iter()
                    .map(|w| TableWrites {
                        table: w.table,
                        rows: w.rows.clone(),
                    })
                    .collect(),
            },
            ReplicaEvent::Schema {
                catalog_version,
                tables,
                copies,
                compacted_below,
            } => ReplicaEvent::Schema {
                catalog_version: *catalog_version,
                tables: tables.clone(),
                copies: copies.iter().map(Table::committed_copy).collect(),
                compacted_below: *compacted_below,
            },
        }
    }
}

/// One table's rows changed by a commit: (row id, new version; None = deleted).
pub struct TableWrites {
    pub table: TableId,
    pub rows: Vec<(RowId, Option<Box<[Value]>>)>,
}

/// What one mesh message carries to every replica.
pub type ReplicaBatch = Arc<Vec<ReplicaEvent>>;

/// Why [`Replica::peek`] did not serve a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The read's timestamp is above what the replica has applied, or the replica has not
    /// applied the latest DDL yet: what it lacks is committed and already queued for it, so
    /// it will catch up ([`Replica::applied_changed`]).
    Behind,
    /// The replica compacted past the read's timestamp: only the compute can serve it.
    Compacted,
    /// Not a read a replica can serve: it needs the block's own intents, or the table is not
    /// replicated (`ringwire.table_stats`).
    NotReplicated,
}

/// One shard's replica of the compute's tables. Only that shard's thread touches it.
pub struct Replica {
    shard: usize,
    shared: Arc<Shared>,
    tables: RefCell<HashMap<TableId, Table>>,
    /// Every commit at or below this is applied, none above.
    applied: Cell<Timestamp>,
    /// The catalog version the replica's tables match.
    catalog_version: Cell<u64>,
    /// No version a read at or above this needs has been dropped.
    compacted_below: Cell<Timestamp>,
    commits_since_compaction: Cell<u64>,
    /// Reads waiting for the replica to catch up, woken after each batch applied.
    applied_notify: Notify,
}

impl Replica {
    pub fn new(shard: usize, shared: Arc<Shared>) -> Replica {
        Replica {
            shard,
            // Version 0 and no tables is the compute's state at startup; every later change
            // arrives as events, the first `Schema` carrying a copy of every table.
            catalog_version: Cell::new(0),
            shared,
            tables: RefCell::new(HashMap::new()),
            applied: Cell::new(0),
            compacted_below: Cell::new(0),
            commits_since_compaction: Cell::new(0),
            applied_notify: Notify::default(),
        }
    }

    /// Resolves after the next batch is applied (a read that found the replica behind waits
    /// for this, then checks again).
    pub(crate) fn applied_changed(&self) -> NotifyWait<'_> {
        self.applied_notify.wait()
    }

    /// The timestamp of the last commit applied.
    pub fn applied(&self) -> Timestamp {
        self.applied.get()
    }

    /// Apply a batch shipped by the compute (events in compute order). The last shard to
    /// receive a batch takes its rows over; the others copy them. Allocates: this is the
    /// commit path, not the read path.
    pub fn apply(&self, batch: ReplicaBatch) {
        match Arc::try_unwrap(batch) {
            Ok(events) => events.into_iter().for_each(|e| self.apply_event(e)),
            Err(shared) => shared
                .iter()
                .for_each(|e| self.apply_event(e.clone_for_replica())),
        }
        if self.commits_since_compaction.get() >= COMPACT_EVERY_COMMITS {
            self.compact();
        }
        self.applied_notify.notify_all();
    }

    fn apply_event(&self, event: ReplicaEvent) {
        let mut tables = self.tables.borrow_mut();
        match event {
            ReplicaEvent::Commit { ts, writes } => {
                debug_assert!(
                    ts > self.applied.get(),
                    "replica on shard {} got commit {ts} after {}",
                    self.shard,
                    self.applied.get()
                );
                for written in writes {
                    // A table dropped later in compute order is not here; skip it.
                    let Some(table) = tables.get_mut(&written.table) else {
                        continue;
                    };
                    for (rid, data) in written.rows {
                        table.apply_committed(rid, data, ts);
                    }
                }
                self.applied.set(ts);
                self.commits_since_compaction
                    .set(self.commits_since_compaction.get() + 1);
            }
            ReplicaEvent::Schema {
                catalog_version,
                tables: live,
                copies,
                compacted_below,
            } => {
                tables.retain(|id, _| live.contains(id));
                for copy in copies {
                    tables.insert(copy.def().id, copy);
                }
                self.catalog_version.set(catalog_version);
                self.compacted_below
                    .set(self.compacted_below.get().max(compacted_below));
            }
        }
    }

    /// Drop versions no read on this shard can need: below the oldest snapshot this shard's
    /// blocks hold (its own slot in `oracle::Holds`, written only by this thread) and below
    /// `applied`. Reads outside a block run synchronously against the replica (no await
    /// between loading the frontier and reading), so no unheld read can be overtaken.
    pub fn compact(&self) {
        self.commits_since_compaction.set(0);
        let mut horizon = self.applied.get();
        if let Some(held) = self.shared.holds.held(self.shard) {
            horizon = horizon.min(held);
        }
        if horizon <= self.compacted_below.get() {
            return;
        }
        for table in self.tables.borrow_mut().values_mut() {
            table.compact_replica(horizon);
        }
        self.compacted_below.set(horizon);
    }

    /// The frontier this shard's reads see now.
    pub fn frontier(&self) -> Timestamp {
        self.shared.frontiers.read(self.shard)
    }

    /// Run a SELECT (or COPY TO) plan at `read` against the replica, appending its encoded
    /// rows to `out`, if the replica provably holds what the read must see (module docs);
    /// `Err(Fallback)` if not (then `out` is untouched). A `serializable` read
    /// ([`ReadAt::Latest`]) needs `applied >= latest_floor`, the shard's frontier when the
    /// read started ([`Replica::frontier`]). Returns the row count and the timestamp read
    /// at. Allocates nothing for a cached point select.
    #[allow(clippy::too_many_arguments)]
    pub fn peek(
        &self,
        plan: &TablePlan,
        params: &[Value],
        read: ReadSpec,
        latest_floor: Timestamp,
        session: &dyn SessionInfo,
        formats: &[Format],
        out: &mut Vec<u8>,
        chunk: Option<&mut ScanCursor>,
    ) -> Result<Result<(u64, Timestamp), PgError>, Fallback> {
        let (TablePlan::Select(select) | TablePlan::CopyTo { source: select, .. }) = plan else {
            return Err(Fallback::NotReplicated);
        };
        if read.tx.is_some() {
            return Err(Fallback::NotReplicated);
        }
        let applied = self.applied.get();
        let ts = match read.at {
            // As at the compute: if this replica compacted past the frontier the statement
            // loaded (only possible after it waited for the replica), read at the horizon — a
            // state between the statement's start and now, so still strict serializable.
            ReadAt::Frontier(ts) => ts.max(self.compacted_below.get()),
            ReadAt::Snapshot(ts) => ts,
            // `serializable`: the compute would read at its latest commit. The replica may
            // stand in only when it holds every commit acknowledged before the read started
            // (the frontier then) and then reads at everything it has.
            ReadAt::Latest if applied >= latest_floor => applied,
            ReadAt::Latest => return Err(Fallback::Behind),
        };
        if ts < self.compacted_below.get() {
            return Err(Fallback::Compacted);
        }
        if ts > applied || self.catalog_version.get() != self.shared.catalog_version() {
            return Err(Fallback::Behind);
        }
        let tables = self.tables.borrow();
        let Some(table) = tables.get(&select.table) else {
            return Err(Fallback::NotReplicated);
        };
        let mark = out.len();
        let view = View { ts, tx: None };
        Ok(
            match run_select(table, plan, params, view, session, formats, out, chunk) {
                Ok(count) => Ok((count, ts)),
                Err(e) => {
                    out.truncate(mark);
                    Err(e)
                }
            },
        )
    }

    /// Row versions held (`replica_versions` in `ringwire.shard_stats`): what its compaction
    /// bounds.
    pub fn version_count(&self) -> usize {
        self.tables
            .borrow()
            .values()
            .map(Table::version_count)
            .sum()
    }
}
