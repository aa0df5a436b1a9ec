//! Per-shard counters and the `ringwire.*` relations that show them.
//!
//! Every counter is a plain `Cell` owned by one shard and bumped only on that shard: no atomic
//! and no shared cache line is written per query (STYLE.md, observability without cost). They
//! are merged only when someone asks: `SELECT ... FROM ringwire.shard_stats` gathers one
//! [`ShardStats`] from every shard over the mesh (one message each way per shard) and runs the
//! query over the rows locally. `ringwire.table_stats` is answered by the compute, which holds
//! the tables.
//!
//! Both relations are read-only and live in the `ringwire` schema, so they never clash with a
//! user's table of the same name.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};

use protocol::types::{Scalar, Type, Value};

use crate::compute::{ColumnDef, TableDef, TableId, TableRef};

/// One shard's counters. Only that shard's thread touches them.
#[derive(Default)]
pub struct Counters {
    /// Strict-serializable read timestamps taken from the shard's own frontier slot: one per
    /// statement outside a block, one per block's snapshot. No cross-core round trip.
    pub oracle_hits: Cell<u64>,
    /// Extra loads of the frontier: a block's snapshot raced a compaction and had to be taken
    /// again (see `oracle::Holds::try_hold`). The fast path has no slower fallback to count:
    /// the compute publishes every commit to every shard's slot before acknowledging it.
    pub oracle_misses: Cell<u64>,
    /// Reads at the compute's latest timestamp, not asking the oracle
    /// (`transaction_isolation = 'serializable'`).
    pub latest_reads: Cell<u64>,
    /// Requests the compute answered on this shard without any message (the compute shard).
    pub direct_requests: Cell<u64>,
    /// Mesh messages carrying requests to the compute, and the requests in them.
    pub batches_sent: Cell<u64>,
    pub requests_sent: Cell<u64>,
    /// The largest batch sent.
    pub batch_max: Cell<u64>,
}

impl Counters {
    pub fn bump(counter: &Cell<u64>) {
        counter.set(counter.get() + 1);
    }

    pub fn record_batch(&self, size: usize) {
        Self::bump(&self.batches_sent);
        self.requests_sent
            .set(self.requests_sent.get() + size as u64);
        self.batch_max.set(self.batch_max.get().max(size as u64));
    }
}

/// What one shard reports for `ringwire.shard_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardStats {
    pub shard: usize,
    pub oracle_hits: u64,
    pub oracle_misses: u64,
    pub latest_reads: u64,
    pub direct_requests: u64,
    pub batches_sent: u64,
    pub requests_sent: u64,
    pub batch_max: u64,
    pub plan_cache_hits: u64,
    pub plan_cache_misses: u64,
    /// Transaction blocks on this shard holding a snapshot, and the oldest one.
    pub open_snapshots: u64,
    pub oldest_snapshot: Option<u64>,
}

/// `ringwire.shard_stats`: one row per shard.
pub const SHARD_STATS_ID: TableId = TableId::MAX;
/// `ringwire.table_stats`: one row per table, from the compute.
pub const TABLE_STATS_ID: TableId = TableId::MAX - 1;

const INT4: Type = Type {
    scalar: Scalar::Int4,
    array: false,
};
const INT8: Type = Type {
    scalar: Scalar::Int8,
    array: false,
};
const TEXT: Type = Type {
    scalar: Scalar::Text,
    array: false,
};

fn def(id: TableId, name: &str, columns: &[(&str, Type)]) -> TableRef {
    Arc::new(TableDef {
        id,
        name: name.to_string(),
        columns: columns
            .iter()
            .map(|&(name, ty)| ColumnDef {
                name: name.to_string(),
                ty,
                not_null: false,
                default: None,
            })
            .collect(),
        primary_key: None,
        indexes: Vec::new(),
    })
}

/// The relation `ringwire.<name>`, if there is one. The definition's name is unqualified, so a
/// query can qualify columns as `shard_stats.shard`.
pub fn relation(name: &str) -> Option<TableRef> {
    static SHARD_STATS: OnceLock<TableRef> = OnceLock::new();
    static TABLE_STATS: OnceLock<TableRef> = OnceLock::new();
    match name {
        "shard_stats" => Some(
            SHARD_STATS
                .get_or_init(|| {
                    def(
                        SHARD_STATS_ID,
                        "shard_stats",
                        &[
                            ("shard", INT4),
                            ("oracle_fast_path_hits", INT8),
                            ("oracle_fast_path_misses", INT8),
                            ("serializable_reads", INT8),
                            ("direct_requests", INT8),
                            ("batches_sent", INT8),
                            ("requests_sent", INT8),
                            ("batch_size_max", INT8),
                            ("plan_cache_hits", INT8),
                            ("plan_cache_misses", INT8),
                            ("open_snapshots", INT8),
                            ("oldest_snapshot", INT8),
                        ],
                    )
                })
                .clone(),
        ),
        "table_stats" => Some(
            TABLE_STATS
                .get_or_init(|| {
                    def(
                        TABLE_STATS_ID,
                        "table_stats",
                        &[
                            ("table_name", TEXT),
                            ("live_rows", INT8),
                            ("versions", INT8),
                            ("index_entries", INT8),
                        ],
                    )
                })
                .clone(),
        ),
        _ => None,
    }
}

/// Whether `id` is one of the `ringwire.*` relations (read-only, not held by the compute's
/// tables).
pub fn is_virtual(id: TableId) -> bool {
    id == SHARD_STATS_ID || id == TABLE_STATS_ID
}

fn int8(n: u64) -> Value {
    Value::Int8(i64::try_from(n).unwrap_or(i64::MAX))
}

impl ShardStats {
    /// This shard's row of `ringwire.shard_stats`, in the relation's column order.
    pub fn row(&self) -> Vec<Value> {
        vec![
            Value::Int4(self.shard as i32),
            int8(self.oracle_hits),
            int8(self.oracle_misses),
            int8(self.latest_reads),
            int8(self.direct_requests),
            int8(self.batches_sent),
            int8(self.requests_sent),
            int8(self.batch_max),
            int8(self.plan_cache_hits),
            int8(self.plan_cache_misses),
            int8(self.open_snapshots),
            self.oldest_snapshot.map_or(Value::Null, int8),
        ]
    }
}

/// A row of `ringwire.table_stats`.
pub fn table_row(
    name: &str,
    live_rows: usize,
    versions: usize,
    index_entries: usize,
) -> Vec<Value> {
    vec![
        Value::Text(name.to_string()),
        int8(live_rows as u64),
        int8(versions as u64),
        int8(index_entries as u64),
    ]
}
