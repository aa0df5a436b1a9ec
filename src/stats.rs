//! Per-shard counters and the `ringwire.*` relations that show them.
//!
//! Every counter is a plain `Cell` owned by one shard and bumped only on that shard: no atomic
//! and no shared cache line is written per query (STYLE.md, observability without cost). They
//! are merged only when someone asks: `SELECT ... FROM ringwire.shard_stats` gathers one
//! [`ShardStats`] from every shard over the mesh (one message each way per shard) and runs the
//! query over the rows locally. `ringwire.table_stats` is answered by the compute, which holds
//! the tables.
//!
//! `ringwire.latency` is gathered the same way: one row per shard and per kind of latency
//! (statements by protocol and kind, receive → first byte, dispatcher round trip, compute
//! peek), plus the same rows merged over all shards (`shard` NULL). The serving layer's numbers
//! come from `shards::metrics` (each shard's [`shards::metrics::ShardMetrics`], resolved once
//! by the engine); the metrics endpoint (`crate::metrics_http`) renders the same gather.
//!
//! The relations are read-only and live in the `ringwire` schema, so they never clash with a
//! user's table of the same name.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use hdrhistogram::Histogram;
use shards::metrics::{latency_histogram, MetricsSnapshot, KINDS, PROTOCOLS};

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
    /// Reads this shard's read replica served (no message); reads that found it behind and
    /// waited for it to catch up (then served by it, so counted in both); and reads sent on
    /// to the compute (it had compacted past them, or it was still behind after
    /// `REPLICA_WAITS_MAX` batches). See `crate::replica`.
    pub replica_hits: Cell<u64>,
    pub replica_stale: Cell<u64>,
    pub replica_fallbacks: Cell<u64>,
    /// Mesh messages carrying requests to the compute, and the requests in them.
    pub batches_sent: Cell<u64>,
    pub requests_sent: Cell<u64>,
    /// The largest batch sent.
    pub batch_max: Cell<u64>,
    /// Requests per batch sent, and the time from queuing a request to its reply (µs).
    pub batch_sizes: Hist,
    pub round_trip_us: Hist,
    /// False with `--metrics off`: the histograms above record nothing.
    pub metrics_on: bool,
}

/// A fixed-bounds histogram written only by its shard (never resized, so recording never
/// allocates).
pub struct Hist(pub RefCell<Histogram<u64>>);

impl Default for Hist {
    fn default() -> Hist {
        Hist(RefCell::new(latency_histogram()))
    }
}

impl Hist {
    pub fn record(&self, value: u64) {
        self.0.borrow_mut().saturating_record(value.max(1));
    }

    /// Record `value` as `n` samples (one measured of `n` alike).
    pub fn record_n(&self, value: u64, n: u64) {
        self.0.borrow_mut().saturating_record_n(value.max(1), n);
    }

    /// Record the microseconds since `started`, if the clock was read (metrics on).
    pub fn record_since(&self, started: Option<Instant>) {
        if let Some(started) = started {
            self.record(started.elapsed().as_micros() as u64);
        }
    }

    pub fn copy(&self) -> Histogram<u64> {
        self.0.borrow().clone()
    }
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
        if self.metrics_on {
            self.batch_sizes.record(size as u64);
        }
    }

    /// The clock, if metrics are on.
    pub fn start(&self) -> Option<Instant> {
        self.metrics_on.then(Instant::now)
    }
}

/// The engine's histograms of one shard (or merged): requests per dispatcher batch,
/// dispatcher round trip and compute peek time in µs (peeks only on the compute shard).
#[derive(Clone, Debug)]
pub struct EngineHistograms {
    pub batch_sizes: Histogram<u64>,
    pub round_trip_us: Histogram<u64>,
    pub peek_us: Histogram<u64>,
}

impl EngineHistograms {
    fn merge(&mut self, other: &EngineHistograms) {
        for (a, b) in [
            (&mut self.batch_sizes, &other.batch_sizes),
            (&mut self.round_trip_us, &other.round_trip_us),
            (&mut self.peek_us, &other.peek_us),
        ] {
            a.add(b).expect("histograms with equal bounds add");
        }
    }
}

/// What one shard reports for `ringwire.shard_stats`, `ringwire.latency` and `/metrics`.
#[derive(Clone, Debug)]
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
    pub replica_hits: u64,
    pub replica_stale: u64,
    pub replica_fallbacks: u64,
    /// The replica's last applied commit and the row versions it holds (None: no replica on
    /// this shard).
    pub replica_applied: Option<u64>,
    pub replica_versions: Option<u64>,
    /// Transaction blocks on this shard holding a snapshot, and the oldest one.
    pub open_snapshots: u64,
    pub oldest_snapshot: Option<u64>,
    /// The serving layer's numbers (connections, statements, bytes, errors, stalls).
    pub serving: MetricsSnapshot,
    pub engine: EngineHistograms,
}

/// Every shard's stats added up: counters summed, histograms added exactly.
pub fn merge(all: &[ShardStats]) -> Option<ShardStats> {
    let (first, rest) = all.split_first()?;
    let mut m = first.clone();
    for s in rest {
        m.oracle_hits += s.oracle_hits;
        m.oracle_misses += s.oracle_misses;
        m.latest_reads += s.latest_reads;
        m.direct_requests += s.direct_requests;
        m.batches_sent += s.batches_sent;
        m.requests_sent += s.requests_sent;
        m.batch_max = m.batch_max.max(s.batch_max);
        m.plan_cache_hits += s.plan_cache_hits;
        m.plan_cache_misses += s.plan_cache_misses;
        m.replica_hits += s.replica_hits;
        m.replica_stale += s.replica_stale;
        m.replica_fallbacks += s.replica_fallbacks;
        m.replica_applied = match (m.replica_applied, s.replica_applied) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        m.replica_versions = match (m.replica_versions, s.replica_versions) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        m.open_snapshots += s.open_snapshots;
        m.oldest_snapshot = match (m.oldest_snapshot, s.oldest_snapshot) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        m.serving.merge(&s.serving);
        m.engine.merge(&s.engine);
    }
    Some(m)
}

/// `ringwire.shard_stats`: one row per shard.
pub const SHARD_STATS_ID: TableId = TableId::MAX;
/// `ringwire.table_stats`: one row per table, from the compute.
pub const TABLE_STATS_ID: TableId = TableId::MAX - 1;
/// `ringwire.latency`: latency quantiles per shard and merged.
pub const LATENCY_ID: TableId = TableId::MAX - 2;

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
const FLOAT8: Type = Type {
    scalar: Scalar::Float8,
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
    static LATENCY: OnceLock<TableRef> = OnceLock::new();
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
                            ("statements", INT8),
                            ("connections_open", INT8),
                            ("connections_opened", INT8),
                            ("connections_closed", INT8),
                            ("connections_rejected", INT8),
                            ("bytes_in", INT8),
                            ("bytes_out", INT8),
                            ("errors", INT8),
                            ("executor_stalls", INT8),
                            ("executor_stall_us_max", INT8),
                            ("batch_size_p50", INT8),
                            ("batch_size_p99", INT8),
                            ("replica_hits", INT8),
                            ("replica_stale", INT8),
                            ("replica_fallbacks", INT8),
                            ("replica_applied", INT8),
                            ("replica_versions", INT8),
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
        "latency" => Some(
            LATENCY
                .get_or_init(|| {
                    def(
                        LATENCY_ID,
                        "latency",
                        &[
                            ("shard", INT4),
                            ("protocol", TEXT),
                            ("kind", TEXT),
                            ("count", INT8),
                            ("mean_us", FLOAT8),
                            ("p50_us", INT8),
                            ("p99_us", INT8),
                            ("p999_us", INT8),
                            ("max_us", INT8),
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
    id == SHARD_STATS_ID || id == TABLE_STATS_ID || id == LATENCY_ID
}

/// Whether `id` is a relation gathered from every shard (not answered by the compute).
pub fn is_gathered(id: TableId) -> bool {
    id == SHARD_STATS_ID || id == LATENCY_ID
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
            int8(self.serving.statements.iter().sum()),
            int8(self.serving.connections_open()),
            int8(self.serving.connections_opened),
            int8(self.serving.connections_closed),
            int8(self.serving.connections_rejected),
            int8(self.serving.bytes_in),
            int8(self.serving.bytes_out),
            int8(self.serving.errors.iter().map(|(_, n)| n).sum()),
            int8(self.serving.stalls),
            int8(self.serving.stall_us_max),
            int8(self.engine.batch_sizes.value_at_quantile(0.5)),
            int8(self.engine.batch_sizes.value_at_quantile(0.99)),
            int8(self.replica_hits),
            int8(self.replica_stale),
            int8(self.replica_fallbacks),
            self.replica_applied.map_or(Value::Null, int8),
            self.replica_versions.map_or(Value::Null, int8),
        ]
    }

    /// Every latency this shard (or merge) keeps, as (protocol, kind, histogram, sum in µs;
    /// None where no exact sum is kept).
    pub fn latencies(&self) -> Vec<(&'static str, &'static str, &Histogram<u64>, Option<u64>)> {
        let s = &self.serving;
        let mut all = Vec::new();
        for (p, pname) in PROTOCOLS {
            for (k, kname) in KINDS {
                let i = shards::metrics::series(p, k);
                all.push((pname, kname, &s.latency_us[i], Some(s.latency_sum_us[i])));
            }
        }
        all.push((
            "any",
            "first_byte",
            &s.first_byte_us,
            Some(s.first_byte_sum_us),
        ));
        all.push((
            "any",
            "dispatch_round_trip",
            &self.engine.round_trip_us,
            None,
        ));
        all.push(("any", "compute_peek", &self.engine.peek_us, None));
        all
    }

    /// This shard's rows of `ringwire.latency`; `shard` None for the merged rows.
    pub fn latency_rows(&self, shard: Option<usize>) -> Vec<Vec<Value>> {
        self.latencies()
            .into_iter()
            .map(|(p, k, h, _)| {
                vec![
                    shard.map_or(Value::Null, |s| Value::Int4(s as i32)),
                    Value::Text(p.to_string()),
                    Value::Text(k.to_string()),
                    int8(h.len()),
                    Value::Float8(if h.is_empty() { 0.0 } else { h.mean() }),
                    int8(h.value_at_quantile(0.5)),
                    int8(h.value_at_quantile(0.99)),
                    int8(h.value_at_quantile(0.999)),
                    int8(h.max()),
                ]
            })
            .collect()
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
